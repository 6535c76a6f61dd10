"""Incoming events are queued and written in batches: one thread hop and one transaction per batch.

A pipelining client (or many clients at once) fills the queue while the previous batch is being
written, so the cost of the hop and the commit is shared by every event in the batch. Each event's
future resolves with its :class:`SaveOutcome` (or the error of its batch), in queue order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..event import Event
from .store import EventStore, SaveOutcome

log = logging.getLogger(__name__)

MAX_BATCH = 1024
MAX_QUEUED_BYTES = 32 * 1024 * 1024  # submitters wait (and stop reading their sockets) beyond this

RunInWriter = Callable[..., Awaitable[Any]]


class BatchWriter:
    def __init__(self, store: EventStore, run: RunInWriter, on_commit: Callable[[], None] | None = None) -> None:
        self._store = store
        self._run = run
        self._on_commit = on_commit
        self._queue: list[tuple[Event, int | None, int, asyncio.Future[SaveOutcome]]] = []
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="embedded-relay-writer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for _ev, _q, _size, fut in self._queue:
            if not fut.done():
                fut.set_exception(ConnectionError("the relay is stopping"))
        self._queue.clear()

    async def submit(self, ev: Event, quota: int | None, size: int) -> asyncio.Future[SaveOutcome]:
        """Queue ``ev`` (``size``: its frame's bytes) and return the future of its outcome."""
        while self._queued_bytes + size > MAX_QUEUED_BYTES and self._queue:
            self._room.clear()
            await self._room.wait()
        fut: asyncio.Future[SaveOutcome] = asyncio.get_running_loop().create_future()
        self._queue.append((ev, quota, size, fut))
        self._queued_bytes += size
        self._wake.set()
        return fut

    async def _loop(self) -> None:
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            try:
                outcomes = await self._run(self._store.save_batch, [(ev, quota) for ev, quota, _s, _f in batch])
            except Exception as exc:  # the whole batch was rolled back: every event gets the reason
                if not isinstance(exc, OSError | ValueError) and type(exc).__module__ != "sqlite3":
                    log.exception("the embedded relay could not write a batch")
                for _ev, _q, _s, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
            else:
                for (_ev, _q, _s, fut), outcome in zip(batch, outcomes, strict=True):
                    if not fut.done():
                        fut.set_result(outcome)
                if self._on_commit is not None:
                    self._on_commit()
            finally:
                self._queued_bytes -= sum(size for _e, _q, size, _f in batch)
                self._room.set()
