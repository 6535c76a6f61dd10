"""The embedded relay's write path: events one at a time and pipelined answered in order, the WAL
bounded under a steady stream (a background checkpoint alone never lets SQLite start the WAL over
while commits keep coming), and the checkpoint thread kept off the CPU an OK waits for.

Raw websockets, in-process relays; every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import websockets

from didactyl_tui.nostr.embedded_relay.limits import RelayLimits
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.embedded_relay.store import EventStore, SaveResult
from didactyl_tui.nostr.embedded_relay.wal import FOLD_INTERVAL_S, Checkpointer
from didactyl_tui.nostr.embedded_relay.writer import BatchWriter, Verdict
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey

T0 = 1_700_000_000
SK = SecretKey.from_hex("00" * 31 + "43")
MiB = 1024 * 1024
UNLIMITED = {"events_per_second": 0, "bytes_per_minute": 0, "author_events_per_second": 0,
             "author_bytes_per_minute": 0}


def note(i: int, *, kind: int = 1, tags: list[list[str]] | None = None, size: int = 300) -> Event:
    return sign_event(SK, kind=kind, content=f"note {i} " + "x" * size, created_at=T0 + i, tags=tags or [])


async def publish(ws: websockets.ClientConnection, ev: Event) -> list[Any]:
    await ws.send(json.dumps(["EVENT", ev.to_dict()]))
    return json.loads(await asyncio.wait_for(ws.recv(), 10))


async def save(writer: BatchWriter, ev: Event) -> Verdict:
    return await asyncio.wait_for(await writer.submit(ev, None, 400), 10)


def wal_bytes(db: Path) -> int:
    try:
        return os.path.getsize(f"{db}-wal")
    except OSError:
        return 0


class ForegroundOnly(Checkpointer):
    """Our checkpointer with its background passes switched off: the WAL can start over only when
    the writer folds it, as under a stream of commits that never leaves a background pass a gap."""

    def poke(self) -> None:
        pass


async def test_a_steady_stream_of_single_events_keeps_the_wal_bounded(tmp_path: Path) -> None:
    db = tmp_path / "wal.db"
    limit = 1 * MiB
    pool = ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()

    async def run(fn: Any, *args: Any) -> Any:
        return await loop.run_in_executor(pool, fn, *args)

    store = await run(lambda: EventStore(db, auto_checkpoint=False, max_wal_bytes=limit))
    wal = ForegroundOnly(db)
    writer = BatchWriter(store, run, lambda _ev, _size: None, wal=wal)
    writer.start()
    events = [note(i) for i in range(401)]
    try:
        for ev in events[:400]:  # ~40 KB of WAL per commit: ~16 MiB written, 16x the bound
            verdict = await save(writer, ev)
            assert verdict.saved is not None and verdict.saved.result is SaveResult.STORED
        await asyncio.sleep(FOLD_INTERVAL_S)  # folds are spaced; the last one may be that recent
        await save(writer, events[400])  # finds the WAL oversized: folds
        for i in range(500, 1000):  # the next commit starts the WAL over and cuts the file back
            if wal_bytes(db) <= limit:
                break
            await asyncio.sleep(0.01)
            await save(writer, note(i))
        assert wal_bytes(db) <= limit
        # Folding moved the events into the database: every stored one is still served.
        assert await run(store.count) >= len(events)
    finally:
        await writer.stop()
        wal.stop()
        await run(store.close)
        pool.shutdown()


async def test_events_sent_one_by_one_and_pipelined_are_answered_in_order_and_all_stored(tmp_path: Path) -> None:
    relay = EmbeddedRelay(tmp_path / "order.db", limits=RelayLimits(**UNLIMITED))
    await relay.start()
    try:
        async with websockets.connect(relay.url, max_size=None) as ws:
            lone = [note(i, size=20) for i in range(5)]
            for ev in lone:  # each OK alone: handed to the socket at once
                assert await publish(ws, ev) == ["OK", ev.id, True, ""]
            burst = [note(100 + i, size=20) for i in range(300)]
            for ev in burst:  # no waiting: later ones queue behind the first, answered in order
                await ws.send(json.dumps(["EVENT", ev.to_dict()]))
            answers = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in burst]
            assert [a[1] for a in answers] == [ev.id for ev in burst]
            assert all(a[2] is True for a in answers)
            # A replaceable version older than the stored one, sent alone: refused, not stored.
            new = sign_event(SK, kind=0, content="new", created_at=T0 + 10, tags=[])
            old = sign_event(SK, kind=0, content="old", created_at=T0 + 5, tags=[])
            assert (await publish(ws, new))[2] is True
            refused = await publish(ws, old)
            assert refused[2] is False and refused[3].startswith("replaced:")
        assert await relay.count() == len(lone) + len(burst) + 1
    finally:
        await relay.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")
async def test_the_checkpoint_thread_runs_only_on_otherwise_idle_cpu(tmp_path: Path) -> None:
    relay = EmbeddedRelay(tmp_path / "idle.db")
    await relay.start()
    try:
        threads = [t for t in threading.enumerate() if t.name == "embedded-relay-checkpoint" and t.native_id]
        assert threads
        deadline = time.monotonic() + 5  # the thread lowers itself as it starts
        while os.sched_getscheduler(threads[-1].native_id) != os.SCHED_IDLE and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert os.sched_getscheduler(threads[-1].native_id) == os.SCHED_IDLE
    finally:
        await relay.stop()


class _Recorded:
    """The checkpointer's connection, noting when each checkpoint starts."""

    def __init__(self, db: Any) -> None:
        self.db, self.started = db, []

    def execute(self, sql: str) -> Any:
        self.started.append(time.monotonic())
        return self.db.execute(sql)

    def close(self) -> None:
        self.db.close()


def _commits(path: Path, checkpointer: Checkpointer, seconds: float) -> list[float]:
    """Commit a row every 5 ms for ``seconds``, poking as the writer does; returns the commit times."""
    import sqlite3

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE IF NOT EXISTS t (x BLOB)")
    times = [time.monotonic()]
    while times[-1] - times[0] < seconds:
        db.execute("INSERT INTO t VALUES (?)", (os.urandom(2000),))
        times.append(time.monotonic())
        checkpointer.poke()
        time.sleep(0.005)
    db.close()
    return times[1:]


def _recorded_checkpointer(path: Path) -> tuple[Checkpointer, _Recorded]:
    """A checkpointer on a new WAL database, its checkpoints' start times noted."""
    import sqlite3

    sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").fetchall()
    checkpointer = Checkpointer(path, interval_s=0.02)
    recorded = _Recorded(checkpointer._db)
    checkpointer._db = recorded  # type: ignore[assignment]
    return checkpointer, recorded


def test_a_checkpoint_waits_for_a_pause_in_the_commits(tmp_path: Path) -> None:
    from didactyl_tui.nostr.embedded_relay import wal

    path = tmp_path / "quiet.db"
    checkpointer, recorded = _recorded_checkpointer(path)
    try:
        commits = _commits(path, checkpointer, 0.6)  # a run of commits 5 ms apart
        deadline = time.monotonic() + 5
        while not any(t > commits[-1] for t in recorded.started) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert any(t > commits[-1] for t in recorded.started), "no checkpoint after the commits stopped"
        quiet = wal.QUIET_S * 0.8
        for t in recorded.started:
            # Only after a pause: the commit before it, or the gap before that commit (a loaded machine may
            # have paused the run itself; a commit may land between the check and the checkpoint).
            before = [c for c in commits if c <= t]
            if before and len(before) < len(commits):
                gap_before = before[-1] - before[-2] if len(before) > 1 else quiet
                assert t - before[-1] >= quiet or gap_before >= quiet, "a checkpoint ran amid the commits"
    finally:
        checkpointer.stop()


def test_a_checkpoint_waits_no_longer_than_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from didactyl_tui.nostr.embedded_relay import wal

    monkeypatch.setattr(wal, "MAX_DEFER_S", 0.2)
    path = tmp_path / "busy.db"
    checkpointer, recorded = _recorded_checkpointer(path)
    try:
        commits = _commits(path, checkpointer, 1.0)  # commits that never pause
        assert any(commits[0] < t < commits[-1] for t in recorded.started), "the checkpoint waited past its bound"
    finally:
        checkpointer.stop()
