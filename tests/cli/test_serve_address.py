"""``didactyl serve`` says where it can be reached, and that is where its embedded relay listens (#31): after
``[relays] embedded_port`` changed, a restarted serve moves the relay (nobody else was on it); with the port taken
by another program, or with another client on the relay, it prints the address still in use and one line saying
why, with the fix; ``didactyl relay status`` says the same. The real console entry, real relay processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from agent_support import AGENT_KEY
from cli_support import Served, cli_env, didactyl
from relay_servers import fast_client_kwargs, free_ports

from didactyl_tui.nostr.embedded_relay.shared import find_shared_relay
from didactyl_tui.nostr.pool import RelayPool


def config(port: int) -> str:
    return (f'[relays]\nembedded_port = {port}\nembedded_idle_exit_s = 120\ntimeout_s = 2.0\n'
            '[memory]\nbackend = "none"\n')


def served_on(line: str) -> list[str]:
    """The relay URLs serve's "serving as … on …" line names."""
    return re.findall(r"ws://[^\s,()]+", line)


async def serve_once(env: dict[str, str]) -> Served:
    served = Served(env)
    await served.start()
    assert await served.stop() == 0, served.log
    return served


async def status(env: dict[str, str]) -> tuple[dict[str, object], str]:
    as_json = await asyncio.to_thread(didactyl, env, "relay", "status", "--json")
    text = await asyncio.to_thread(didactyl, env, "relay", "status")
    return json.loads(as_json.stdout), text.stdout


async def test_serve_prints_the_address_in_use_after_its_port_changed_and_with_its_port_taken(tmp_path: Path) -> None:
    first_port, second_port = free_ports(2)
    config_file = tmp_path / "config" / "didactyl" / "config.toml"
    env = cli_env(tmp_path, config(first_port), DIDACTYL_NSEC=AGENT_KEY.nsec())
    first = await serve_once(env)
    assert served_on(await first.wait_for("serving as", 1)) == [f"ws://127.0.0.1:{first_port}"]
    before, _ = await status(env)

    config_file.write_text(config(second_port))  # the relay process still runs, on the first port
    _, text = await status(env)
    assert f"not 127.0.0.1:{second_port} as the config asks: it moves when a didactyl starts" in text
    second = await serve_once(env)
    assert served_on(await second.wait_for("serving as", 1)) == [f"ws://127.0.0.1:{second_port}"]
    after, text = await status(env)
    assert after["url"] == f"ws://127.0.0.1:{second_port}" and after["pid"] == before["pid"]  # moved, not restarted
    assert after["matches_config"] and after["address_note"] is None
    assert f"listens where the config asks ([relays] embedded_host and embedded_port: 127.0.0.1:{second_port})" in text
    assert "taken" not in second.log and "WARNING didactyl.service" not in second.log

    with socket.socket() as blocker:  # another program on the port the config now asks for
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        config_file.write_text(config(taken))
        third = await serve_once(env)
        held, text = await status(env)
    assert served_on(await third.wait_for("serving as", 1)) == [f"ws://127.0.0.1:{second_port}"]  # still in use
    said = (f"port {taken} is taken by another program; the embedded relay runs on ws://127.0.0.1:{second_port} "
            "instead: stop that program, or set [relays] embedded_port to a free port")
    assert third.log.count(said) == 1
    assert said in text and held["matches_config"] is False and held["url"] == f"ws://127.0.0.1:{second_port}"


@contextlib.asynccontextmanager
async def serving_with_its_port_taken(tmp_path: Path) -> AsyncIterator[tuple[Served, int, socket.socket]]:
    """serve started while another program holds the port the config asks for (``blocker``: held until closed); its
    relay runs elsewhere."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        served = Served(cli_env(tmp_path, config(port), DIDACTYL_NSEC=AGENT_KEY.nsec()))
        await served.start()
        try:
            yield served, port, blocker
        finally:
            assert await served.stop() == 0, served.log


async def test_serve_started_on_a_taken_port_prints_the_free_one_it_took(tmp_path: Path) -> None:
    async with serving_with_its_port_taken(tmp_path) as (served, taken, _):
        relay = await find_shared_relay(tmp_path / "data")
        assert relay is not None and relay.port != taken
        assert served_on(await served.wait_for("serving as", 1)) == [relay.url]
        await served.wait_for(f"port {taken} is taken by another program; the embedded relay runs on {relay.url} "
                              "instead", 1)


async def test_a_serve_whose_relay_comes_back_elsewhere_prints_a_new_attach_line(tmp_path: Path) -> None:
    """Started with its port taken, serve's relay runs elsewhere; stopped while serve runs, it comes back where the
    config asks (the port free now): the attach line printed at start names the old address, so serve prints one
    naming the new."""
    from didactyl_tui.nostr.embedded_relay.shared import stop_shared_relay
    from didactyl_tui.nostr.nip19 import encode_nprofile

    async with serving_with_its_port_taken(tmp_path) as (served, port, blocker):
        blocker.close()
        first = await find_shared_relay(tmp_path / "data")
        assert first is not None and first.port != port
        assert await stop_shared_relay(first)
        there = f"ws://127.0.0.1:{port}"
        await served.wait_for(f"the embedded relay runs on {there} now", 60)
        command = await served.wait_for(f"didactyl attach {encode_nprofile(AGENT_KEY.public_key_hex, [there])}", 10)
        assert "--invite " in command  # nobody paired yet: a new invitation with it


async def test_a_serve_restarted_beside_another_client_keeps_the_old_address_and_says_why(tmp_path: Path) -> None:
    first_port, second_port = free_ports(2)
    env = cli_env(tmp_path, config(first_port), DIDACTYL_NSEC=AGENT_KEY.nsec())
    await serve_once(env)
    relay = await find_shared_relay(tmp_path / "data")
    assert relay is not None
    async with RelayPool([relay.url], proof_keys={relay.url: relay.proof_key}, **fast_client_kwargs()) as other:
        assert await other.wait_connected(5)  # e.g. the app open on the same data dir
        (tmp_path / "config" / "didactyl" / "config.toml").write_text(config(second_port))
        served = await serve_once(env)
        shown, text = await status(env)
    assert served_on(await served.wait_for("serving as", 1)) == [f"ws://127.0.0.1:{first_port}"]
    said = (f"the embedded relay still runs on ws://127.0.0.1:{first_port}, not 127.0.0.1:{second_port} as [relays] "
            "embedded_host and embedded_port ask: 1 client was connected, and a move would cut them off")
    assert said in served.log and said in text and shown["matches_config"] is False
