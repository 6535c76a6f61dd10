"""Incoming events are queued, then verified and written in batches: one thread hop and one
transaction per batch.

A pipelining client (or many clients at once) fills the queue while the previous batch is being
processed, so the hop and the commit are shared by every event in the batch. Signature checks run on
the writer thread too (libsecp256k1 releases the GIL), so the event loop keeps reading and answering
while a batch is verified. Each event's future resolves, in queue order, with a :class:`Verdict`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import secp256k1

from ...errors import NostrError
from ..event import Event
from ..kinds import is_ephemeral
from .store import EventStore, LockBusy, SaveOutcome
from .wal import FOLD_INTERVAL_S, Checkpointer

log = logging.getLogger(__name__)

MAX_BATCH = 1024
INLINE_MAX = 1  # batches this small are verified and written on the loop, without a thread hop
MAX_QUEUED_BYTES = 32 * 1024 * 1024  # submitters wait (and stop reading their sockets) beyond this

RunInWriter = Callable[..., Awaitable[Any]]
#: called on the writer thread for each event whose signature checked out: a refusal, or None
Admit = Callable[[Event, int], "str | None"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What became of one event: ``saved`` (stored events), or ``refusal`` (an OK-false reason), or
    neither for a verified ephemeral event (to broadcast, never stored)."""

    saved: SaveOutcome | None = None
    refusal: str | None = None


EPHEMERAL = Verdict()


@functools.lru_cache(maxsize=4096)
def _public_key(pubkey_hex: str) -> secp256k1.PublicKey | None:
    """Parsed x-only keys, cached: most events come from a few authors, and parsing costs as much
    as a third of a verification."""
    try:
        return secp256k1.PublicKey(b"\x02" + bytes.fromhex(pubkey_hex), raw=True)
    except Exception:  # the binding raises on x not on the curve
        return None


def check_event(ev: Event) -> str | None:
    """``Event.check`` with cached keys: None when the id and signature are right, else the reason."""
    try:
        if ev.computed_id() != ev.id:
            return "invalid: event id does not match its content"
    except NostrError as exc:
        return f"invalid: {exc}"
    key = _public_key(ev.pubkey)
    try:
        good = key is not None and key.schnorr_verify(bytes.fromhex(ev.id), bytes.fromhex(ev.sig), None, raw=True)
    except Exception:
        good = False
    return None if good else "invalid: bad signature"


def screen_batch(admit: Admit, entries: list[tuple[Event, int | None, int]]
                 ) -> tuple[list[Verdict | None], list[tuple[Event, int | None]]]:
    """Verify and admit a batch: a verdict per event (None: to be stored) and the events to store."""
    verdicts: list[Verdict | None] = []
    to_save: list[tuple[Event, int | None]] = []
    for ev, quota, size in entries:
        problem = check_event(ev)
        if problem is not None:
            verdicts.append(Verdict(refusal=problem))
            continue
        refusal = admit(ev, size)
        if refusal is not None:
            verdicts.append(Verdict(refusal=refusal))
        elif is_ephemeral(ev.kind):
            verdicts.append(EPHEMERAL)
        else:
            verdicts.append(None)
            to_save.append((ev, quota))
    return verdicts, to_save


def merge(verdicts: list[Verdict | None], saved: list[SaveOutcome]) -> list[Verdict]:
    outcomes = iter(saved)
    return [v if v is not None else Verdict(saved=next(outcomes)) for v in verdicts]


def process_batch(store: EventStore, admit: Admit, entries: list[tuple[Event, int | None, int]]) -> list[Verdict]:
    """Verify, admit and store a batch (on the writer thread); one transaction for the stored ones."""
    verdicts, to_save = screen_batch(admit, entries)
    return merge(verdicts, store.save_batch(to_save) if to_save else [])


class BatchWriter:
    def __init__(self, store: EventStore, run: RunInWriter, admit: Admit, wal: Checkpointer | None = None) -> None:
        self._store = store
        self._run = run
        self._admit = admit
        self._wal = wal
        self._next_fold = 0.0
        self._queue: list[tuple[Event, int | None, int, asyncio.Future[Verdict]]] = []
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

    async def submit(self, ev: Event, quota: int | None, size: int) -> asyncio.Future[Verdict]:
        """Queue ``ev`` (``size``: its frame's bytes) and return the future of its verdict."""
        while self._queued_bytes + size > MAX_QUEUED_BYTES and self._queue:
            self._room.clear()
            await self._room.wait()
        fut: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._queue.append((ev, quota, size, fut))
        self._queued_bytes += size
        self._wake.set()
        return fut

    def _committed(self) -> bool:
        """After a commit: wake the background checkpointer; True when the writer should fold the WAL."""
        wal = self._wal
        if wal is None:
            return False
        wal.poke()
        return not wal.in_pass and time.monotonic() >= self._next_fold and self._store.wal_oversized()

    async def _fold_wal(self) -> None:
        """Bound the WAL (see :mod:`.wal`): a checkpoint on the writing connection, on its thread,
        between two batches; events that arrive meanwhile make the next batch."""
        assert self._wal is not None
        try:
            if await self._run(self._wal.fold, self._store.fold_wal):
                self._next_fold = time.monotonic() + FOLD_INTERVAL_S
        except sqlite3.Error as exc:  # the disk, most likely: the next interval retries
            self._next_fold = time.monotonic() + FOLD_INTERVAL_S
            log.warning("the embedded relay could not fold its WAL: %s", exc)

    async def _process(self, entries: list[tuple[Event, int | None, int]]) -> list[Verdict]:
        """A lone event is handled right here: a thread hop would cost more than the work. It never
        waits for a lock on the loop: if another process holds one, the thread takes over."""
        if len(entries) > INLINE_MAX:
            return await self._run(process_batch, self._store, self._admit, entries)
        verdicts, to_save = screen_batch(self._admit, entries)
        if not to_save:
            return merge(verdicts, [])
        try:
            saved = self._store.save_batch(to_save, wait_for_lock=False)
        except LockBusy:
            saved = await self._run(self._store.save_batch, to_save)
        return merge(verdicts, saved)

    async def _loop(self) -> None:
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            entries = [(ev, quota, size) for ev, quota, size, _f in batch]
            fold = False
            try:
                verdicts = await self._process(entries)
            except Exception as exc:  # the whole batch was rolled back: every event gets the reason
                if not isinstance(exc, sqlite3.Error | OSError):
                    log.exception("the embedded relay could not write a batch")
                for _ev, _q, _s, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
            else:
                for (_ev, _q, _s, fut), verdict in zip(batch, verdicts, strict=True):
                    if not fut.done():
                        fut.set_result(verdict)
                fold = self._committed()
            finally:
                self._queued_bytes -= sum(size for _e, _q, size, _f in batch)
                self._room.set()
            if fold:
                await self._fold_wal()
