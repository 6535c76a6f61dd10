"""``didactyl whoami`` for a newcomer: ``--admin`` prints the admin key's npub whole (the key ``attach`` talks with,
made 0600 when there is none), and with only ``$DIDACTYL_BUNKER`` set ``whoami`` connects to the signer as a save
does instead of asking to start didactyl first. The real console entry in a subprocess; a real relay and the
scripted NIP-46 bunker holding the agent's key."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

from agent_support import AGENT_KEY
from cli_support import cli_env, didactyl
from nip46_bunker import ScriptedBunker

from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.keys import SecretKey


def test_whoami_admin_makes_the_admin_key_once_and_prints_its_npub_whole(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    first = didactyl(env, "whoami", "--admin")
    assert first.returncode == 0, first.stderr
    path = tmp_path / "data" / "admin.key"
    key = SecretKey.parse(path.read_text().strip())
    assert first.stdout.split() == [key.npub, key.public_key_hex]  # whole, on a line of its own
    assert f"made your admin key: {path} (mode 0600)" in first.stderr
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and key.nsec() not in first.stdout + first.stderr
    again = didactyl(env, "whoami", "--admin", "--json")
    assert again.returncode == 0 and again.stderr == ""
    assert json.loads(again.stdout) == {"npub": key.npub, "pubkey": key.public_key_hex, "source": "file",
                                        "key_file": str(path)}
    assert didactyl(env, "whoami").returncode == 1  # the agent's key is another matter: none here yet


async def test_whoami_with_only_a_bunker_set_connects_to_the_signer_and_keeps_the_connection(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, \
            ScriptedBunker([relay.url], AGENT_KEY, secret="once") as bunker:
        config = f'[relays]\nembedded = false\nurls = ["{relay.url}"]\ntimeout_s = 3.0\n[memory]\nbackend = "none"\n'
        env = cli_env(tmp_path, config, DIDACTYL_BUNKER=bunker.bunker_uri())
        first = await asyncio.to_thread(didactyl, env, "whoami")
        assert first.returncode == 0, first.stderr
        assert first.stdout.split() == [AGENT_KEY.npub, AGENT_KEY.public_key_hex]
        session = tmp_path / "data" / "signer.json"
        assert stat.S_IMODE(os.stat(session).st_mode) == 0o600 and "once" not in session.read_text()
        connects = bunker.methods().count("connect")
        again = await asyncio.to_thread(didactyl, env, "whoami", "--json")
        assert json.loads(again.stdout)["npub"] == AGENT_KEY.npub and json.loads(again.stdout)["source"] == \
            "remote signer"
        assert bunker.methods().count("connect") == connects  # the kept connection: no second connect
