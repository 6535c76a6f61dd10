"""The shared relay listens where the launcher's config asks (#31): a changed host or port moves the running relay
process when no client is connected, and otherwise it stays and relay.lock says why; a port another program holds
is one answer, never a silent move. Real relay processes, real sockets; the proof of identity holds after a move."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from relay_servers import fast_client_kwargs, free_port, free_ports
from shared_relay_support import kill_shared_relays, relay_pids

from didactyl_tui.nostr.embedded_relay.lockfile import LOCK_FILE, AskedAddress, read_lock
from didactyl_tui.nostr.embedded_relay.probe import ask_identity
from didactyl_tui.nostr.embedded_relay.shared import SharedRelay, ensure_shared_relay, find_shared_relay
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool

SK = SecretKey.from_hex("00" * 31 + "61")
OPTIONS = {"allowed_writers": [SK.public_key_hex], "gift_wrap_recipients": [SK.public_key_hex]}


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data"
    kill_shared_relays(tmp_path)
    assert relay_pids(tmp_path) == []


async def launch(data_dir: Path, port: int, host: str = "127.0.0.1") -> SharedRelay:
    """What every didactyl does at its start: find the relay (or start it) with its config's options and address."""
    return await ensure_shared_relay(data_dir, host, port, idle_exit_s=60, relay_options=OPTIONS, reconfigure=True)


async def listening(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except OSError:
        return False
    writer.close()
    return True


async def test_a_changed_port_moves_the_relay_process_when_nobody_is_connected(data_dir: Path) -> None:
    first_port, second_port = free_ports(2)
    first = await launch(data_dir, first_port)
    assert first.port == first_port and first.started_by_us and not first.not_where_asked
    async with RelayPool([first.url], proof_keys={first.url: first.proof_key}, **fast_client_kwargs()) as pool:
        assert await pool.wait_connected(5)
        assert (await pool.publish(sign_event(SK, kind=1, content="kept", created_at=int(time.time())), 3)).any_accepted

    moved = await launch(data_dir, second_port)

    assert moved.moved and moved.port == second_port and not moved.not_where_asked
    assert (moved.pid, moved.token) == (first.pid, first.token)  # the same process and instance, elsewhere
    lock = read_lock(data_dir / LOCK_FILE)
    assert lock is not None and lock.port == second_port and lock.asked == AskedAddress("127.0.0.1", second_port,
                                                                                        lock.asked.request)
    assert not await listening("127.0.0.1", first_port)
    # It proves who it is on the new address, to a launcher and to a client holding the data dir's key.
    found = await find_shared_relay(data_dir)
    assert found is not None and found.url == moved.url
    async with RelayPool([moved.url], proof_keys={moved.url: moved.proof_key}, **fast_client_kwargs()) as pool:
        assert await pool.wait_connected(5)
        stored = await pool.query([{"authors": [SK.public_key_hex], "kinds": [1]}], 3)
    assert [ev.content for ev in stored] == ["kept"]  # the same database
    assert not (await launch(data_dir, second_port)).moved  # asked again for where it is: nothing to do


async def test_a_relay_with_a_client_stays_where_it_is_and_says_why_then_moves_once_it_is_gone(
        data_dir: Path) -> None:
    first_port, second_port = free_ports(2)
    first = await launch(data_dir, first_port)
    states: list[object] = []
    pool = RelayPool([first.url], proof_keys={first.url: first.proof_key}, on_state=lambda url, s: states.append(s),
                     **fast_client_kwargs())
    await pool.start()
    try:
        assert await pool.wait_connected(5)
        seen = len(states)
        stayed = await launch(data_dir, second_port)
        assert not stayed.moved and stayed.url == first.url and stayed.news
        refusal = stayed.not_where_asked
        assert refusal is not None and (refusal.host, refusal.port, refusal.refused) == (
            "127.0.0.1", second_port, AskedAddress.CLIENTS)
        assert refusal.detail == "1 client was connected"
        assert read_lock(data_dir / LOCK_FILE).asked == refusal  # what `relay status` reads
        assert not (await launch(data_dir, second_port)).news  # the same answer again: nothing new to say
        assert len(states) == seen  # the client was not cut off
        assert await listening("127.0.0.1", first_port)
    finally:
        await pool.close()
    deadline = time.monotonic() + 30
    while not (moved := await launch(data_dir, second_port)).moved:  # until the relay has seen the client go
        assert time.monotonic() < deadline, moved.not_where_asked
        await asyncio.sleep(0.05)
    assert moved.port == second_port and moved.pid == first.pid and not moved.not_where_asked


async def test_a_port_another_program_holds_is_answered_and_the_relay_stays(data_dir: Path) -> None:
    first = await launch(data_dir, free_port())
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        stayed = await launch(data_dir, taken)
    assert not stayed.moved and stayed.url == first.url and stayed.news
    assert stayed.not_where_asked == AskedAddress("127.0.0.1", taken, stayed.asked.request, AskedAddress.TAKEN,
                                                  f"port {taken} is taken by another program")
    answer = await ask_identity(stayed.host, stayed.port, stayed.proof_key)
    assert answer.proven is not None and answer.proven.instance == first.token  # still serving, where it was


async def test_a_relay_started_on_a_taken_port_says_so_once(data_dir: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        started = await launch(data_dir, taken)
        again = await launch(data_dir, taken)  # the next didactyl asks again: still taken, already said
    assert started.started_by_us and started.port != taken and started.news
    assert started.not_where_asked is not None and started.not_where_asked.refused == AskedAddress.TAKEN
    assert again.url == started.url and not again.news and again.not_where_asked.refused == AskedAddress.TAKEN


async def test_a_changed_host_moves_the_relay_and_an_address_of_no_interface_is_refused(data_dir: Path) -> None:
    port = free_port()
    first = await launch(data_dir, port)
    moved = await launch(data_dir, port, host="127.0.0.2")  # another loopback address (Linux routes 127/8 to lo)
    assert moved.moved and moved.url == f"ws://127.0.0.2:{port}" and moved.listen_host == "127.0.0.2"
    assert not await listening("127.0.0.1", port) and moved.pid == first.pid
    nowhere = await launch(data_dir, port, host="192.0.2.1")  # TEST-NET-1: no interface of this machine has it
    refusal = nowhere.not_where_asked
    assert not nowhere.moved and nowhere.url == moved.url
    assert refusal is not None and refusal.refused == AskedAddress.UNAVAILABLE and "192.0.2.1" in refusal.detail


async def test_new_options_from_a_connected_launcher_keep_the_relays_answer_about_its_address(data_dir: Path) -> None:
    """The app's own relay keeper, connected, asks for a new allow-list without asking for a move: the relay takes the
    options and still says why it is not on the configured port (not "1 client was connected")."""
    from didactyl_tui.nostr.embedded_relay.options import digest

    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        started = await launch(data_dir, taken)
        keys = {started.url: started.proof_key}
        async with RelayPool([started.url], proof_keys=keys, **fast_client_kwargs()) as pool:
            assert await pool.wait_connected(5)
            wider = {**OPTIONS, "allowed_writers": [SK.public_key_hex, "ab" * 32]}
            again = await ensure_shared_relay(data_dir, "127.0.0.1", taken, relay_options=wider, reconfigure=True,
                                              move=False)
    assert again.reloaded and again.options_digest == digest(wider) and not again.news
    assert again.not_where_asked is not None and again.not_where_asked.refused == AskedAddress.TAKEN
    assert read_lock(data_dir / LOCK_FILE).asked.refused == AskedAddress.TAKEN
