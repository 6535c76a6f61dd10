"""The embedded relay's WAL upkeep: checkpoints off the write path, and a bound on the WAL's size.

:class:`Checkpointer` folds the WAL back into the database from a thread of its own, at the lowest
CPU priority, with PASSIVE checkpoints, which never wait for (or block) the writer, in the pauses between
commits when there are any (at most ``MAX_DEFER_S`` late).

Under a stream of commits with no pause, a background checkpoint never reaches the WAL's last frame
(frames keep arriving while it copies), so SQLite never starts the WAL over: the file grows without
end and every commit appends to fresh disk blocks. Once the WAL file passes ``max_wal_bytes``
(:meth:`.store.EventStore.wal_oversized`), the writer folds the rest itself between two transactions
(:meth:`.store.EventStore.fold_wal`, at most every ``FOLD_INTERVAL_S``): nothing is appended meanwhile,
so that checkpoint completes, the next commit starts the WAL over and SQLite cuts the file back to
``max_wal_bytes`` (its ``journal_size_limit``). The writer pays one short checkpoint (the background
thread has already copied most frames) per ``max_wal_bytes`` written.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

FOLD_INTERVAL_S = 0.1  # folds at most this often (a WAL a reader kept from starting over is retried then)
QUIET_S = 0.05  # a background checkpoint waits for this long without a commit (a burst of writes goes first)
MAX_DEFER_S = 2.0  # but never longer than this


def lowest_cpu_priority() -> None:
    """Run the calling thread only when a CPU would otherwise idle (Linux SCHED_IDLE; else nice 19).
    A checkpoint is ~30 ms of copying and fsync: at normal priority on a 2-core box it takes the core a
    publisher's client or the event loop was about to wake on, and a dozen OKs wait a scheduler tick."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class Checkpointer:
    """Background PASSIVE checkpoints, woken by :meth:`poke` after commits, at most every ``interval_s``."""

    def __init__(self, path: Path, interval_s: float = 0.5) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._interval = interval_s
        self._dirty = threading.Event()
        self._last_commit = 0.0
        self._stopping = False
        self._pass = threading.Lock()  # held by a background pass, or by the writer's fold
        self._thread = threading.Thread(target=self._run, name="embedded-relay-checkpoint", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        self._last_commit = time.monotonic()
        self._dirty.set()

    def _run(self) -> None:
        lowest_cpu_priority()
        while True:
            self._dirty.wait()
            if self._stopping:
                break
            self._wait_for_quiet()
            if self._stopping:  # stop() came while it waited: its wake-up must not be cleared below
                break
            self._dirty.clear()
            with self._pass:
                try:
                    self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    pass  # busy or closing: the next poke tries again
            time.sleep(self._interval)
        self._db.close()

    def _wait_for_quiet(self) -> None:
        """Let a run of commits finish first: a checkpoint copies megabytes beside the writer (measured: the
        publish->OK time of the events it overlaps doubles), so it waits until no commit came for
        ``QUIET_S``, but never more than ``MAX_DEFER_S`` (the writer's fold bounds the WAL meanwhile)."""
        deadline = time.monotonic() + MAX_DEFER_S
        while not self._stopping:
            now = time.monotonic()
            if now - self._last_commit >= QUIET_S or now >= deadline:
                return
            time.sleep(QUIET_S)

    @property
    def in_pass(self) -> bool:
        """A background checkpoint is under way (a fold now would find the checkpoint lock taken)."""
        return self._pass.locked()

    def fold(self, fold: Callable[[], object]) -> bool:
        """Run the writer's ``fold`` unless a background pass is under way (then False: try later).
        The background thread waits for it, not the other way round: the writer never waits."""
        if not self._pass.acquire(blocking=False):
            return False
        try:
            fold()
        finally:
            self._pass.release()
        return True

    def stop(self) -> None:
        self._stopping = True
        self._dirty.set()
        self._thread.join(timeout=5)
