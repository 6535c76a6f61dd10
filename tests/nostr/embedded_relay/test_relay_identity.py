"""A local program that takes the embedded relay's port gets nothing from its clients (#30).

The relay proves in every handshake that it holds the data dir's relay.key (nostr/relay_proof.py). A client given
the key (the app's pool) hangs up on any server that does not, before a single frame: the impostors here know
everything another local user can read (the NIP-11 document, relay.lock, the port) and even pass the client's
nonce on to the real relay. Real relay processes, real sockets; each impostor records every frame it receives.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from impostor_relay import ImpostorRelay, PortSnatcher, try_bind
from relay_servers import eventually, fast_client_kwargs, free_port
from shared_relay_support import database_held, kill_shared_relays, relay_pids, request_reload

from didactyl_tui.nostr.embedded_relay.lockfile import LOCK_FILE, pid_running, read_lock
from didactyl_tui.nostr.embedded_relay.probe import fetch_info_document
from didactyl_tui.nostr.embedded_relay.shared import ensure_shared_relay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.relay import RelayClient
from didactyl_tui.nostr.relay_proof import ProofKey
from didactyl_tui.nostr.results import Verdict

SK = SecretKey.from_hex("00" * 31 + "54")
FILTER = {"kinds": [1], "authors": [SK.public_key_hex]}


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data"
    kill_shared_relays(tmp_path)
    assert relay_pids(tmp_path) == []


def note(content: str) -> Event:
    return sign_event(SK, kind=1, content=content, created_at=int(time.time()))


def where_the_relay_is(data_dir: Path) -> tuple[str, int] | None:
    """What any reader of relay.lock learns: where the relay listens now."""
    lock = read_lock(data_dir / LOCK_FILE)
    return (lock.connect_host, lock.port) if lock is not None else None


async def bound_when_free(port: int, timeout: float = 20.0) -> socket.socket:
    """The port, bound by us as soon as the killed relay's socket lets it go."""
    holder: list[socket.socket] = []

    def take() -> bool:
        if not holder and (sock := try_bind(port)) is not None:
            holder.append(sock)
        return bool(holder)

    assert await eventually(take, timeout), f"port {port} stayed taken"
    return holder[0]


RESTART = {"limits": {"max_subscriptions": 31}, "db_busy_timeout": 60.0}  # a reload that restarts the relay


@pytest.mark.parametrize("proof", ["none", "replay", "relay"])
async def test_the_client_sends_nothing_to_a_server_on_the_port_of_a_killed_relay(
        data_dir: Path, proof: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="didactyl_tui.nostr.relay")
    first = await ensure_shared_relay(data_dir, port=free_port(), idle_exit_s=60)
    learned = await fetch_info_document(first.host, first.port)
    seen: list[Event] = []
    pool = RelayPool([first.url], proof_keys={first.url: first.proof_key}, **fast_client_kwargs())
    client = pool.client(first.url)
    await pool.start()
    try:
        assert await pool.wait_connected(10)
        pool.subscribe([FILTER], lambda url, ev: seen.append(ev))
        assert (await pool.publish(note("before"), 5)).any_accepted
        os.kill(first.pid, signal.SIGKILL)
        assert await eventually(lambda: not pid_running(first.pid), 20)
        sock = await bound_when_free(first.port)
        # A new relay (another didactyl started it) on a free port: relay.lock tells anyone where.
        second = await ensure_shared_relay(data_dir, port=first.port, idle_exit_s=60)
        assert second.port != first.port
        async with ImpostorRelay(instance=first.token, info=learned, proof=proof, sock=sock,
                                 relay_at=lambda: where_the_relay_is(data_dir)) as impostor:
            refused = client.refusals
            assert await eventually(lambda: client.refusals >= refused + 3, 20), client.last_error
            verdict = (await pool.publish(note("while the impostor holds the port"), 2)).results[first.url]
            assert verdict.verdict is Verdict.NOT_CONNECTED
            assert impostor.upgrades >= 3 and impostor.questions >= 3  # it was reached, asked, and refused ...
            assert impostor.frames == []  # ... before any frame: no REQ, no EVENT, no AUTH, not even a CLOSE
            why = "it gave no proof of identity" if proof == "none" else "its proof of identity is wrong"
            assert client.last_error == (f"the server on 127.0.0.1:{first.port} did not prove it is this data "
                                         f"dir's embedded relay ({why}): nothing was sent to it")
            assert any(client.last_error in r.getMessage() for r in caplog.records)
            # The real relay is found where relay.lock says: the subscription and publishes go there.
            pool.retarget(first.url, second.url)
            assert await eventually(lambda: pool.states()[second.url].value == "connected", 20)
            assert (await pool.publish(note("after"), 5)).any_accepted
            assert await eventually(lambda: any(e.content == "after" for e in seen), 10)
            assert impostor.frames == []
    finally:
        await pool.close()


async def test_a_reload_restart_whose_port_was_taken_sends_the_impostor_nothing(data_dir: Path) -> None:
    """The Done-when of #30 at the client: the relay restarts inside its process (a reload) and a local program
    binds its port in between, knowing all a local user can read and passing each nonce on to the relay itself.
    The relay's restart is held (on its database) until the client has met the impostor: no timing decides."""
    relay = await ensure_shared_relay(data_dir, port=free_port(), idle_exit_s=60)
    learned = await fetch_info_document(relay.host, relay.port)
    seen: list[Event] = []
    pool = RelayPool([relay.url], proof_keys={relay.url: relay.proof_key}, **fast_client_kwargs())
    client = pool.client(relay.url)
    await pool.start()
    try:
        assert await pool.wait_connected(10)
        pool.subscribe([FILTER], lambda url, ev: seen.append(ev))
        assert (await pool.publish(note("before the reload"), 5)).any_accepted
        snatcher = PortSnatcher(relay.port).start()
        impostor: ImpostorRelay | None = None
        with database_held(relay.db_path):  # the relay's restart waits here, its port closed
            request_reload(data_dir, relay.pid, RESTART)
            assert await eventually(lambda: snatcher.sock is not None, 20)  # the port is the program's now
            sock = await snatcher.finish()
            assert sock is not None
            impostor = ImpostorRelay(instance=relay.token, info=learned, proof="relay", sock=sock,
                                     relay_at=lambda: where_the_relay_is(data_dir))
            await impostor.start()
            assert await eventually(lambda: client.refusals >= 2, 20), client.last_error
            assert impostor.upgrades >= 2 and impostor.frames == []
            verdict = (await pool.publish(note("during the reload"), 2)).results[relay.url]
            assert verdict.verdict is Verdict.NOT_CONNECTED
        # The relay comes back on another port (its own is taken) and says so in relay.lock; the impostor now passes
        # each nonce on to it there, and gets the relay's answer for its own connection: still refused.
        assert await eventually(lambda: (where_the_relay_is(data_dir) or ("", relay.port))[1] != relay.port, 20)
        refused = client.refusals
        assert await eventually(lambda: client.refusals >= refused + 2, 20), client.last_error
        assert "its proof of identity is wrong" in client.last_error
        moved = await ensure_shared_relay(data_dir, port=relay.port)
        assert moved.pid == relay.pid and moved.port != relay.port
        pool.retarget(relay.url, moved.url)  # what the app's keeper does once ensure_shared_relay finds it
        assert await eventually(lambda: pool.states()[moved.url].value == "connected", 20)
        assert (await pool.publish(note("after the reload"), 5)).any_accepted
        assert await eventually(lambda: any(e.content == "after the reload" for e in seen), 10)
        assert impostor.frames == []
    finally:
        await pool.close()
        if impostor is not None:
            await impostor.stop()


async def test_a_client_without_the_key_would_have_fed_the_impostor(data_dir: Path) -> None:
    """The same impostor, a client that checks nothing (as any client of a public relay): it gets the subscription
    and the event at once. What the proof keeps from it is real."""
    relay = await ensure_shared_relay(data_dir, port=0, idle_exit_s=60)
    async with ImpostorRelay(instance=relay.token, proof="relay", relay_at=lambda: where_the_relay_is(data_dir)) as imp:
        async with RelayClient(imp.url, reconnect=False, **fast_client_kwargs()) as unchecked:
            unchecked.subscribe([FILTER], lambda ev: None)
            await unchecked.publish(note("to whoever listens"), 5)
        assert [f[0] for f in imp.frames][:2] == ["REQ", "EVENT"]
        with pytest.raises(Exception, match="did not prove it is this data dir's embedded relay"):
            async with RelayClient(imp.url, reconnect=False, proof_key=relay.proof_key, **fast_client_kwargs()):
                pass
        assert len(imp.frames) == 2  # the checking client sent it nothing


async def test_a_client_checks_the_relay_it_should_and_connects(data_dir: Path) -> None:
    relay = await ensure_shared_relay(data_dir, port=0, idle_exit_s=60)
    async with RelayClient(relay.url, reconnect=False, proof_key=relay.proof_key, **fast_client_kwargs()) as client:
        assert (await client.publish(note("to the proven relay"), 5)).accepted
        assert client.refusals == 0
    with pytest.raises(Exception, match="its proof of identity is wrong"):
        async with RelayClient(relay.url, reconnect=False, proof_key=ProofKey(os.urandom(32)),
                               **fast_client_kwargs()):
            pass


def test_a_pool_refuses_a_proof_key_for_a_relay_it_does_not_hold() -> None:
    with pytest.raises(Exception, match="not in the pool"):
        RelayPool(["ws://127.0.0.1:1"], proof_keys={"ws://127.0.0.1:2": ProofKey(bytes(32))})
