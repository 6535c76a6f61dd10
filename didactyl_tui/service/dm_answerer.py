"""Which process answers a data dir's direct messages: the one holding ``dm.lock`` (a flock). A second one (the app
while ``serve`` runs) stands by, polling, and takes over when the first ends; the holder's pid is written into the
file for the message the others show."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from ..nostr.embedded_relay.lockfile import FileLock

ANSWERER_LOCK = "dm.lock"  # held by the one process that answers this data dir's direct messages
STANDBY_POLL_S = 1.0  # how often a standing-by process tries to take over


class AnswererLock:
    def __init__(self, data_dir: Path) -> None:
        self._lock = FileLock(data_dir / ANSWERER_LOCK)

    async def try_take(self) -> bool:
        """True when this process answers from now on (its pid noted in the file)."""
        if not await asyncio.to_thread(self._lock.try_acquire):
            return False
        with contextlib.suppress(OSError):
            _note_holder(self._lock.path)
        return True

    async def wait_for_turn(self) -> None:
        """Until this process holds the lock (the other answerer ended)."""
        while not await self.try_take():
            await asyncio.sleep(STANDBY_POLL_S)

    def holder(self) -> str:
        """`` (pid N)`` of the process that answers, or "" when it cannot be told."""
        return _holder(self._lock.path)

    def release(self) -> None:
        self._lock.release()


def _holder(path: Path) -> str:
    try:
        pid = int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return ""
    return f" (pid {pid})" if pid > 0 else ""


def _note_holder(path: Path) -> None:
    """Write our pid into the held lock file (the lock is the flock, the pid is for the message others show)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)
