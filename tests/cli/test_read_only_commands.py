"""Read-only commands are read-only: ``prompt``, ``memory show``, ``memory history`` and ``whoami`` publish nothing
of their own — no profile (even when the relays hold none and ``publish_profile`` is on), and no copy of the
memory to a relay that lags. Checked on our relay and rust-nostr's: the agent's events on each are unchanged."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_support import AGENT_KEY, memory_event
from cli_support import outside_env
from relay_servers import EmbeddedRelayUnderTest, RustRelayUnderTest, fast_client_kwargs

from didactyl_tui.nostr.pool import RelayPool

pytest.importorskip("nostr_sdk")

READ_ONLY = [("prompt",), ("prompt", "--message", "hello"), ("memory", "show", "--type", "short_term"),
             ("memory", "show", "--type", "long_term", "--json"), ("memory", "history", "--type", "short_term"),
             ("whoami",)]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "didactyl_tui", *args], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, (args, done.stderr)
    return done


async def agent_events(url: str) -> set[str]:
    async with RelayPool([url], **fast_client_kwargs()) as pool:
        events = await pool.query([{"authors": [AGENT_KEY.public_key_hex]}], timeout=3)
    return {ev.id for ev in events}


async def test_read_only_commands_publish_nothing(tmp_path: Path) -> None:
    # Our relay holds the memory (rust-nostr's in-memory relay answers no filter with two #d values).
    holder, lagging = EmbeddedRelayUnderTest(tmp_path / "holder.sqlite3"), RustRelayUnderTest()
    await holder.start()
    await lagging.start()
    try:
        # Another device saved the memory to one relay only; the other lags, and neither has a profile.
        async with RelayPool([holder.url], **fast_client_kwargs()) as pool:
            saved = memory_event(AGENT_KEY, "remember the milk", int(time.time()) - 60)
            assert (await pool.publish(saved, timeout=3)).any_accepted
        cfg_dir = tmp_path / "config" / "didactyl"
        cfg_dir.mkdir(parents=True)
        (cfg_dir / "config.toml").write_text(
            f'[agent]\nname = "Bot"\npublish_profile = true\n[relays]\nembedded = false\n'
            f'urls = ["{holder.url}", "{lagging.url}"]\ntimeout_s = 2.0\n[memory]\nbackend = "none"\n')
        env = outside_env()
        env.update(DIDACTYL_DATA_DIR=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"),
                   HOME=str(tmp_path / "home"), DIDACTYL_NSEC=AGENT_KEY.nsec())
        for args in READ_ONLY:
            await asyncio.to_thread(cli, env, *args)
        shown = await asyncio.to_thread(cli, env, "memory", "show", "--type", "short_term")
        assert shown.stdout.strip() == "remember the milk", shown.stderr  # it did read the relays
        assert await agent_events(holder.url) == {saved.id}
        assert await agent_events(lagging.url) == set()
        # The control: a command that writes does reach both (so the check above can see a write).
        await asyncio.to_thread(cli, env, "identity", "publish")
        assert len(await agent_events(lagging.url)) >= 1
    finally:
        await holder.stop()
        await lagging.stop()
