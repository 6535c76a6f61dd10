"""Another process holding a SQLite file's write lock (``BEGIN EXCLUSIVE``) until told to let go.

Its function lives here, not in a test module: a ``spawn`` child imports it by name, and test modules are imported
by path (pyproject's ``--import-mode=importlib``)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any


def _hold_lock(path: str, ready: Any, release: Any) -> None:  # runs in the other process
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    ready.set()
    release.wait(30)
    db.execute("ROLLBACK")
    db.close()


class LockHolder:
    """``with LockHolder(path) as lock:`` the file is locked from the moment the block starts; ``lock.let_go()``
    (or the block's end) releases it."""

    def __init__(self, path: Path) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.release = ctx.Event(), ctx.Event()
        self.proc = ctx.Process(target=_hold_lock, args=(str(path), self.ready, self.release), daemon=True)

    def __enter__(self) -> LockHolder:
        self.proc.start()
        assert self.ready.wait(30), "the lock holder did not start"
        return self

    def let_go(self) -> None:
        self.release.set()
        self.proc.join(30)

    def __exit__(self, *exc: object) -> None:
        self.let_go()
