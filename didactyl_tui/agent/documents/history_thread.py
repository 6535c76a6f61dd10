"""The document history (:class:`~.history.DocumentHistory`, SQLite) as the save pipeline and the sync use it: every
read and write on one worker thread, in order, never on the event loop. A locked or broken file gives one warning
(through ``warn``), never an exception into a save or a background path."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ...errors import AgentError
from .history import DocumentHistory, DocumentVersion
from .keys import DocumentKey

R = TypeVar("R")


class HistoryThread:
    def __init__(self, history: DocumentHistory, pubkey: str, warn: Callable[[str], None]) -> None:
        self.history, self.pubkey, self._warn = history, pubkey, warn
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="document-history")
        self._error: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop warnings are told on (the first caller's)

    def _on_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def guarded(self, fn: Callable[..., R], *args: Any) -> R | None:
        """(On the history thread.) ``fn(*args)``; a locked or broken file gives one warning, never an exception."""
        try:
            result = fn(*args)
        except (AgentError, sqlite3.Error) as exc:  # locked by another program, or closed at stop
            message = exc.message if isinstance(exc, AgentError) else str(exc)
            if message != self._error and self._loop is not None:
                self._loop.call_soon_threadsafe(self._warn, f"document history: {message}")
            self._error = message
            return None
        self._error = None
        return result

    async def run(self, fn: Callable[..., R], *args: Any) -> R | None:
        """``fn(*args)`` on the history thread, after everything given to it before."""
        return await self._on_loop().run_in_executor(self._executor, self.guarded, fn, *args)

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """(On the loop.) ``fn(*args)`` on the history thread, in order, not waited for (``fn`` guards itself)."""
        self._on_loop()
        self._executor.submit(fn, *args)

    async def versions(self, key: DocumentKey) -> list[DocumentVersion]:
        """This key's versions of document ``key``, newest first."""
        return await self.run(self.history.versions, key.d_tag, self.pubkey, key.kind) or []

    async def annotate(self, event_id: str, note: str) -> None:
        await self.run(self.history.annotate, event_id, note)

    async def mark_delivered(self, event_id: str) -> None:
        await self.run(self.history.mark_delivered, event_id)

    async def stop(self) -> None:
        """Let the thread finish what it was given."""
        await asyncio.to_thread(self._executor.shutdown, True)
