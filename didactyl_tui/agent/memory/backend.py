"""Pluggable memory backends (one at a time) and the manager that guards the agent from them.

A backend adds a dynamic tail to the prompt (``query_context``, placed after the history so providers'
prefix caches keep working), may offer tools (after the base tools, dispatched before the registry) and
may learn from finished interactive turns (``record_turn``). Whatever a backend does wrong — raising,
hanging, being offline — is logged and never breaks a turn.

Its context is for the admin only (agent/audience.py): it draws on everything the admin said. A guest's turn gets
context only from a backend that can keep to that conversation's own messages (``query_conversation``, learning
them with ``record_conversation_turn``, never mixed into the admin's); from any other it is withheld, with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..audience import TurnAudience
from ..tools.registry import Tool, ToolOutcome, invoke

if TYPE_CHECKING:
    from ...config import Config

log = logging.getLogger("didactyl.memory")


@runtime_checkable
class MemoryBackend(Protocol):
    """What a memory backend provides. Optional extras, looked up with ``getattr``:

    - ``async record_turn(session_id, user_message, reply) -> None``: learn from an interactive turn;
    - ``async probe() -> bool``: check reachability (network backends) and refresh ``is_available()``;
    - ``async aclose() -> None``: release connections;
    - ``async query_conversation(session_id, user_message) -> str | None``: context drawn only from that conversation's
      own messages (a guest's turn; without it, a guest's turn gets no context);
    - ``async record_conversation_turn(session_id, user_message, reply) -> None``: learn a guest conversation's turn
      for that conversation alone (never shown in the admin's context).
    """

    id: str

    def is_available(self) -> bool:
        """Cheap and non-blocking (a cached answer for network backends)."""
        ...

    async def query_context(self, session_id: str, user_message: str) -> str | None:
        """Text for the prompt's dynamic tail, or None when there is nothing relevant."""
        ...

    def tools(self) -> list[Tool]:
        """Tools offered to the model while the backend is available (none by default)."""
        ...


class MemoryManager:
    """Holds at most one backend.

    Registering: none yet → accepted; the same id again → replaced; a different id → rejected (error log),
    the existing one kept.
    """

    def __init__(self, *, context_timeout_s: float = 5.0, record_timeout_s: float = 10.0) -> None:
        self._backend: MemoryBackend | None = None
        self.context_timeout_s = context_timeout_s
        self.record_timeout_s = record_timeout_s

    @property
    def backend(self) -> MemoryBackend | None:
        return self._backend

    @property
    def backend_id(self) -> str | None:
        return self._backend.id if self._backend is not None else None

    def register(self, backend: MemoryBackend) -> bool:
        """Install ``backend``; returns whether it is now the active one."""
        current = self._backend
        if current is None:
            self._backend = backend
            log.info("memory backend %r registered", backend.id)
            return True
        if current.id == backend.id:
            self._backend = backend
            log.info("memory backend %r replaced", backend.id)
            return True
        log.error("memory backend %r rejected: %r is already registered (one backend at a time)",
                  backend.id, current.id)
        return False

    def is_available(self) -> bool:
        backend = self._backend
        if backend is None:
            return False
        try:
            return bool(backend.is_available())
        except Exception:
            log.exception("memory backend %r: is_available() failed", backend.id)
            return False

    async def probe(self) -> bool:
        """Let a network backend check itself (bounded by the context timeout); returns availability."""
        backend = self._backend
        probe: Callable[[], Awaitable[Any]] | None = getattr(backend, "probe", None)
        if backend is not None and probe is not None:
            await self._guarded(backend, "probe", probe(), self.context_timeout_s)
        return self.is_available()

    async def query_context(self, session_id: str, user_message: str) -> str | None:
        backend = self._backend
        if backend is None:
            return None
        if getattr(backend, "probe", None) is not None:
            await self.probe()  # cached by the backend: a network wait only when its answer is stale
        if not self.is_available():
            return None
        result = await self._guarded(backend, "query_context", backend.query_context(session_id, user_message),
                                     self.context_timeout_s)
        if not isinstance(result, str) or not result.strip():
            return None
        return result

    async def context_for(self, session_id: str, user_message: str,
                          audience: TurnAudience) -> tuple[str | None, str | None]:
        """(context, why it is withheld) for a turn of ``audience``: the admin gets the backend's context; a guest only
        what it draws from this conversation's own messages, or nothing, with the reason."""
        backend = self._backend
        if audience.admin or backend is None:
            return await self.query_context(session_id, user_message), None
        own: Callable[[str, str], Awaitable[Any]] | None = getattr(backend, "query_conversation", None)
        if own is None:
            return None, (f"withheld: the {backend.id} backend draws on the admin's conversations and cannot keep to "
                          f"this one's; this is {audience.who}")
        if not self.is_available():
            return None, None
        result = await self._guarded(backend, "query_conversation", own(session_id, user_message),
                                     self.context_timeout_s)
        return (result if isinstance(result, str) and result.strip() else None), None

    def tools(self) -> list[Tool]:
        backend = self._backend
        if backend is None or not self.is_available():
            return []
        try:
            return list(backend.tools())
        except Exception:
            log.exception("memory backend %r: tools() failed", backend.id)
            return []

    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools()]

    def find_tool(self, name: str) -> Tool | None:
        for tool in self.tools():
            if name == tool.name or name in tool.aliases:
                return tool
        return None

    async def call_tool(self, name: str, arguments: str | dict[str, Any] | None) -> ToolOutcome | None:
        """Run a backend tool (checked before the registry); None when the backend has no such tool."""
        tool = self.find_tool(name)
        if tool is None:
            return None
        return await invoke(tool, arguments, None)

    async def record_turn(self, session_id: str, user_message: str, reply: str) -> None:
        """Tell the backend about a finished interactive, non-ephemeral turn (the caller decides which)."""
        backend = self._backend
        record: Callable[[str, str, str], Awaitable[Any]] | None = getattr(backend, "record_turn", None)
        if backend is None or record is None or not self.is_available():
            return
        await self._guarded(backend, "record_turn", record(session_id, user_message, reply), self.record_timeout_s)

    async def record_conversation_turn(self, session_id: str, user_message: str, reply: str) -> None:
        """Tell the backend a guest conversation's turn, for that conversation alone (a backend that cannot keep it
        apart from the admin's never hears it)."""
        backend = self._backend
        record: Callable[[str, str, str], Awaitable[Any]] | None = getattr(backend, "record_conversation_turn", None)
        if backend is None or record is None or not self.is_available():
            return
        await self._guarded(backend, "record_conversation_turn", record(session_id, user_message, reply),
                            self.record_timeout_s)

    async def index_long_term(self, text: str) -> None:
        """Give the backend the current long-term memory (recall indexes it); call it whenever it changes."""
        backend = self._backend
        index: Callable[[str], Any] | None = getattr(backend, "index_long_term", None)
        if backend is None or index is None or not self.is_available():
            return
        await self._guarded(backend, "index_long_term", asyncio.to_thread(index, text), self.record_timeout_s)

    async def forget_session(self, session_id: str) -> None:
        """A conversation was deleted: let the backend drop what it indexed from it."""
        backend = self._backend
        forget: Callable[[str], Any] | None = getattr(backend, "forget_session", None)
        if backend is None or forget is None:
            return
        await self._guarded(backend, "forget_session", asyncio.to_thread(forget, session_id), self.record_timeout_s)

    async def aclose(self) -> None:
        backend = self._backend
        close: Callable[[], Awaitable[Any]] | None = getattr(backend, "aclose", None)
        if backend is not None and close is not None:
            await self._guarded(backend, "aclose", close(), self.record_timeout_s)

    def close(self) -> None:
        """Synchronous best-effort release (for shutdown paths without a loop); prefer ``aclose``."""
        backend = self._backend
        close: Callable[[], Any] | None = getattr(backend, "close", None)
        if backend is not None and close is not None:
            try:
                close()
            except Exception as exc:
                log.warning("memory backend %r: close failed: %s", backend.id, exc)

    @staticmethod
    async def _guarded(backend: MemoryBackend, what: str, call: Awaitable[Any], timeout_s: float) -> Any:
        try:
            async with asyncio.timeout(timeout_s):
                return await call
        except TimeoutError:
            log.warning("memory backend %r: %s took longer than %.1f s; skipped", backend.id, what, timeout_s)
        except Exception as exc:
            log.warning("memory backend %r: %s failed: %s: %s", backend.id, what, type(exc).__name__, exc)
        return None


RECALL_DB = "recall.sqlite3"


def create_memory_manager(config: Config, data_dir: Path, env: Mapping[str, str] | None = None) -> MemoryManager:
    """The manager with the backend named by ``[memory] backend`` ("recall", "honcho" or "none")."""
    manager = MemoryManager()
    kind = config.memory.backend
    if kind == "recall":
        from .backends.recall import RecallBackend

        manager.register(RecallBackend(Path(data_dir) / RECALL_DB,
                                       index_long_term=getattr(config.memory, "index_long_term", True)))
    elif kind == "honcho":
        from .backends.honcho import HonchoBackend

        backend = HonchoBackend.from_config(config.honcho, env)
        if not backend.configured:
            log.info("memory backend 'honcho' selected but [honcho] base_url is empty: it stays unavailable")
        manager.register(backend)
    elif kind != "none":
        log.error("unknown memory backend %r: running without one", kind)
    return manager
