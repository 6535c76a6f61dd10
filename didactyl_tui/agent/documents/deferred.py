"""Saves not signed yet: a burst's newest text (the clock does not allow its date yet), and an edit made while the
agent's remote signer does not answer (NIP-46: the key is elsewhere).

Both are shown and used at once (``DocumentStore.show_deferred``), keep the version they were written on as their
base (so a version that arrives meanwhile is judged as a concurrent edit, not overwritten), and are signed and
published by a task of their own as soon as they can be. An edit waiting for the signer is also kept on disk
(:class:`UnsignedEdits`, in the outbox's database, 0600) until it is signed: a quit or a crash meanwhile loses
nothing, and the next start signs it once the signer answers.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ...errors import AgentError, DidactylError, SignerUnreachableError
from ..private_files import connect_private, storage_error_message, tighten_sqlite_files
from .keys import DocumentKey

SIGNER_RETRY_S = 2.0  # between tries of an edit waiting for the signer (each try waits for the signer's timeout)


class UnsignedEdits:
    """The newest edit of each document that waits for the signer: its text and its base, on disk."""

    def __init__(self, path: Path | str) -> None:
        self._lock = threading.Lock()
        try:
            self._db = connect_private(path, check_same_thread=False, timeout=10)
            with self._db:
                self._db.execute("CREATE TABLE IF NOT EXISTS unsigned_edit (document TEXT PRIMARY KEY, "
                                 "text TEXT NOT NULL, base TEXT)")
            tighten_sqlite_files(path)
        except (sqlite3.Error, OSError) as exc:
            raise AgentError(storage_error_message(exc, "edits waiting for the signer", path), "Storage") from None

    def keep(self, key: DocumentKey, text: str, base: str | None) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO unsigned_edit VALUES (?, ?, ?)", (key.value, text, base))

    def drop(self, key: DocumentKey) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM unsigned_edit WHERE document = ?", (key.value,))

    def all(self) -> list[tuple[DocumentKey, str, str | None]]:
        with self._lock:
            rows = self._db.execute("SELECT document, text, base FROM unsigned_edit").fetchall()
        known = {k.value for k in DocumentKey}  # a document a later version of the app added is left as it is
        return [(DocumentKey(d), str(t), b) for d, t, b in rows if d in known]

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:
                pass


class DeferredSaves:
    """What :class:`~.saving.DocumentSaves` has not signed yet, and the tasks that sign it. ``save_now(key, value,
    base)`` is the pipeline's way out for them; ``check(key, text)`` its codec check of a text; ``sign_delay(key)``
    how long the clock keeps a burst's text back."""

    def __init__(self, store: Any, save_now: Callable[[DocumentKey, Any, str | None], Awaitable[Any]],
                 spawn: Callable[[Any], asyncio.Task[Any]], warn: Callable[[str], None],
                 burst_wait_max_s: float, unsigned: UnsignedEdits | None = None, *,
                 check: Callable[[DocumentKey, str], Any], sign_delay: Callable[[DocumentKey], float]) -> None:
        self.store, self._save_now, self._spawn, self._warn = store, save_now, spawn, warn
        self._check, self._sign_delay = check, sign_delay
        self._burst_wait_max_s, self.unsigned = burst_wait_max_s, unsigned
        self.pending: dict[DocumentKey, tuple[Any, str | None]] = {}  # document -> (value, base)
        self.for_signer: set[DocumentKey] = set()  # of those, the ones waiting for the signer
        self._tasks: dict[DocumentKey, asyncio.Task[Any]] = {}
        self._kept_on_disk = False  # an edit was kept for the signer by this run or a previous one

    def __contains__(self, key: DocumentKey) -> bool:
        return key in self.pending

    async def discard(self, key: DocumentKey) -> None:
        """A newer save supersedes a text not signed yet (on disk too: the next start must not publish it)."""
        self.pending.pop(key, None)
        if key in self.for_signer or (self.unsigned is not None and self._kept_on_disk):
            self.for_signer.discard(key)
            if self.unsigned is not None:
                await asyncio.to_thread(self.unsigned.drop, key)

    def keep(self, key: DocumentKey, value: Any, base: str | None = None) -> None:
        """Show ``value`` now and sign it later. Its base is the version held when the first deferred text was
        given (a version arriving meanwhile was not seen by the writer: the signed save must not claim it)."""
        held = self.store.current_event(key)
        if key in self.pending:
            base = self.pending[key][1]
        elif base is None:
            base = held.id if held else None
        self.pending[key] = (value, base)
        self.store.show_deferred(key, self.store.codec(key).to_text(value), value)
        task = self._tasks.get(key)
        if task is None or task.done():
            self._tasks[key] = self._spawn(self._sign_when_possible(key))

    async def change(self, key: DocumentKey, value: Any) -> None:
        """``value`` replaces the text waiting (shown, so the one a change was made to): it waits as that one did."""
        if key in self.for_signer:
            await self.wait_for_signer(key, value, None)
        else:
            self.keep(key, value)

    async def wait_for_signer(self, key: DocumentKey, value: Any, base: str | None,
                              exc: SignerUnreachableError | None = None) -> None:
        """The signer does not answer (``exc``; None: known away, not asked): keep the edit (on disk too) and sign
        it once it does."""
        first = key not in self.for_signer
        self.for_signer.add(key)
        self.keep(key, value, base)
        if self.unsigned is not None:
            self._kept_on_disk = True
            text = self.store.codec(key).to_text(value)
            await asyncio.to_thread(self.unsigned.keep, key, text, self.pending[key][1])
        if first:
            why = exc.message if exc is not None else "the remote signer does not answer"
            self._warn(f"{why}: the {key.title.lower()} is kept here and will be signed and published when "
                       "the signer answers")

    async def restore(self) -> None:
        """At start: edits a previous run kept for the signer wait again (shown now, signed once it answers)."""
        if self.unsigned is None:
            return
        for key, text, base in await asyncio.to_thread(self.unsigned.all):
            self._kept_on_disk = True
            if key not in self.store.keys:
                continue
            try:
                value = self._check(key, text)
            except DidactylError as exc:  # e.g. a limit lowered since: kept on disk, said, never dropped silently
                self._warn(f"an edit of the {key.title.lower()} kept for the signer no longer reads ({exc.message}); "
                           "it stays kept until it is replaced by a new save")
                continue
            self.for_signer.add(key)
            self.keep(key, value, base)

    async def _sign_when_possible(self, key: DocumentKey) -> None:
        while key in self.pending:
            waiting_signer = key in self.for_signer
            await asyncio.sleep(SIGNER_RETRY_S if waiting_signer else
                                min(max(self._sign_delay(key), 0.05), 1.0))
            if not waiting_signer and 0 < self._sign_delay(key) <= self._burst_wait_max_s:
                continue  # (further ahead: a version from a fast clock arrived; the save below is refused)
            if await self._sign(key) is None:
                return

    async def _sign(self, key: DocumentKey) -> bool | None:
        """One try: None when there was nothing left to sign or it is done (or refused: said in a warning)."""
        deferred = self.pending.pop(key, None)
        if deferred is None:
            return None
        self.for_signer.discard(key)
        try:
            await self._save_now(key, *deferred)  # the signer still away: kept again by the save path
        except AgentError as exc:
            self._warn(exc.message)
        if key in self.pending:
            return True
        if self.unsigned is not None:
            await asyncio.to_thread(self.unsigned.drop, key)
        return None

    async def flush(self) -> None:
        """Sign what can be signed now (at stop); what waits for the signer stays on disk for the next start."""
        for key in list(self.pending):
            if key not in self.for_signer:
                await self._sign(key)
