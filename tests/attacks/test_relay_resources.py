"""Attacks on the embedded relay's memory and descriptors, measured from outside its process.

The relay runs as it does in the app (its own process, ``python -m didactyl_tui.nostr.embedded_relay``);
its RSS is read from /proc/<pid>/status while the attack runs and must stay under RSS_CEILING_MIB.
Before these bounds: two never-reading subscribers took the relay from 28 MiB to 2.4 GiB in ~5 s, one
REQ over 1,200 large events to 1.1 GiB, and 1,014 idle sockets exhausted its descriptors.
Every loop here is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets
from attacks.relay_process import RelayProcess, raw_ws, ws_frame
from relay_servers import eventually

from didactyl_tui.nostr.embedded_relay.store import EventStore
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey

RSS_CEILING_MIB = 300
GROWTH_CEILING_MIB = 64  # above the relay's RSS before the attack
KEY = SecretKey.from_hex("00" * 31 + "b7")
T0 = 1_700_000_000


class PeakRss:
    def __init__(self, relay: RelayProcess) -> None:
        self.relay, self.peak, self._stop = relay, relay.rss_mib(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(OSError):
                self.peak = max(self.peak, self.relay.rss_mib())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def relay_process(tmp_path: Path, **limits: Any) -> Iterator[RelayProcess]:
    relay = RelayProcess("embedded", tmp_path / "relay.sqlite3", limits=limits, rate_limits=False).start()
    try:
        yield relay
    finally:
        relay.stop()


async def connect(url: str) -> websockets.ClientConnection:
    return await websockets.connect(url, max_size=None, compression=None, open_timeout=10, ping_interval=None)


async def req_to_eose(url: str, flt: dict[str, Any], timeout: float = 20) -> tuple[int, int]:
    """(events, bytes) a well-behaved client gets for one REQ, until EOSE."""
    ws = await connect(url)
    count = size = 0
    try:
        await ws.send(json.dumps(["REQ", "q", flt]))
        while True:
            frame = await asyncio.wait_for(ws.recv(), timeout)
            msg = json.loads(frame)
            if msg[0] == "EOSE":
                return count, size
            assert msg[0] == "EVENT", msg
            count, size = count + 1, size + len(frame)
    finally:
        await ws.close()


def big_events(n: int, size: int, start: int = 0) -> list[Event]:
    return [sign_event(KEY, kind=1, content=f"{i} " + "z" * size, created_at=T0 + i, tags=[])
            for i in range(start, start + n)]


async def test_slow_readers_that_subscribe_to_everything_cannot_grow_the_relay(tmp_path: Path) -> None:
    events = big_events(3000, 16_000)  # 48 MB offered, 96 MB of fan-out to the two slow readers
    with relay_process(tmp_path, slow_client_timeout_s=2.0) as relay, PeakRss(relay) as rss:
        baseline = relay.rss_mib()
        slow = []
        for _ in range(2):
            sock, status = raw_ws(relay.url)
            assert status == 101
            sock.sendall(ws_frame(json.dumps(["REQ", "all", {}])))
            slow.append(sock)
        ws = await connect(relay.url)
        try:
            for e in events:
                await ws.send(json.dumps(["EVENT", e.to_dict()]))
            answers = [json.loads(await asyncio.wait_for(ws.recv(), 30)) for _ in events]
        finally:
            await ws.close()
        assert all(a[2] is True for a in answers)  # the publisher was never held up by the readers
        assert await req_to_eose(relay.url, {"kinds": [1], "limit": 5}) == (5, pytest.approx(5 * 16_200, rel=0.05))
        for sock in slow:
            sock.close()
    print(f"slow readers: baseline {baseline:.0f} MiB, peak {rss.peak:.0f} MiB")
    assert rss.peak < RSS_CEILING_MIB
    assert rss.peak - baseline < GROWTH_CEILING_MIB  # the fan-out was not buffered


async def test_a_query_over_large_stored_events_streams_within_its_byte_budget(tmp_path: Path) -> None:
    store = EventStore(tmp_path / "relay.sqlite3")
    for start in range(0, 300, 50):  # 300 events of 400 KB: 120 MB stored
        store.save_batch([(e, None) for e in big_events(50, 400_000, start)])
    store.close()
    budget = 24 * 1024 * 1024
    with relay_process(tmp_path, max_result_bytes=budget, slow_client_timeout_s=2.0) as relay, \
            PeakRss(relay) as rss:
        baseline = relay.rss_mib()
        # A client that asks for everything and never reads: closed after slow_client_timeout_s.
        sock, _ = raw_ws(relay.url)
        sock.sendall(ws_frame(json.dumps(["REQ", "all", {"kinds": [1]}])))
        # Several readers at once get the newest events up to the budget, then EOSE.
        results = await asyncio.gather(*(req_to_eose(relay.url, {"kinds": [1]}) for _ in range(3)))
        for count, size in results:
            assert 50 <= count < 300 and size <= budget + 410_000
        sock.close()
    print(f"big query: baseline {baseline:.0f} MiB, peak {rss.peak:.0f} MiB")
    assert rss.peak < RSS_CEILING_MIB
    assert rss.peak - baseline < GROWTH_CEILING_MIB  # 120 MB stored, never held in memory


def _open_flood(url: str, n: int, deadline: float) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        try:
            sock, _status = raw_ws(url, timeout=5)
        except OSError:
            continue
        socks.append(sock)
    return socks


async def test_a_connection_flood_is_bounded_and_a_legitimate_client_is_still_served(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    per_ip = 256
    with relay_process(tmp_path, max_connections_per_ip=per_ip) as relay, PeakRss(relay) as rss:
        flood = await asyncio.to_thread(_open_flood, relay.url, 1100, time.monotonic() + 90)
        try:
            assert len(flood) >= 1000
            # Refused sockets get HTTP 503 and are closed within the close timeout (1 s); the flood's
            # admitted sockets are silent and hold no subscription: evictable.
            bound = per_ip + 80
            assert await eventually(lambda: relay.open_fds() <= bound, timeout=15), relay.open_fds()
            served = None
            for _ in range(20):  # the app's client reconnects with backoff; bounded here
                with contextlib.suppress(OSError, websockets.ConnectionClosed, TimeoutError):
                    served = await req_to_eose(relay.url, {"kinds": [1]}, timeout=5)
                    break
                await asyncio.sleep(0.25)
            assert served == (0, 0)
        finally:
            for sock in flood:
                sock.close()
    print(f"flood: peak {rss.peak:.0f} MiB")
    assert rss.peak < RSS_CEILING_MIB


async def test_heavy_filters_from_many_connections_stay_bounded(tmp_path: Path) -> None:
    authors = [f"{i:064x}" for i in range(1000)]
    heavy = json.dumps(["REQ", "h", *[{"authors": authors, "#p": authors[:900]}] * 2])  # ~250 KB, 3,802 values
    with relay_process(tmp_path) as relay, PeakRss(relay) as rss:
        baseline = relay.rss_mib()
        conns = [await connect(relay.url) for _ in range(12)]
        try:
            for _ in range(10):  # each REQ replaces the last: parsed, compiled, held, released
                for ws in conns:
                    await ws.send(heavy)
                answers = [json.loads(await asyncio.wait_for(ws.recv(), 30)) for ws in conns]
                assert answers == [["EOSE", "h"]] * len(conns)
            publisher = await connect(relay.url)
            note = sign_event(KEY, kind=1, content="hi", created_at=T0, tags=[["p", authors[5]]])
            await publisher.send(json.dumps(["EVENT", note.to_dict()]))
            assert json.loads(await asyncio.wait_for(publisher.recv(), 10))[2] is True
            await publisher.close()
        finally:
            for ws in conns:
                await ws.close()
    print(f"heavy filters: baseline {baseline:.0f} MiB, peak {rss.peak:.0f} MiB")
    assert rss.peak < RSS_CEILING_MIB
    assert rss.peak - baseline < GROWTH_CEILING_MIB
