"""The context every built-in tool handler receives (injected by the registry, hidden from schemas).

It gives tools the caches and the memory store; the only network a tool can reach goes through the
store's own fetch/publish path. The service builds one and may subclass it to add more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..audience import ADMIN_TURN, TurnAudience
from ..documents.keys import DocumentKey
from ..documents.store import DocumentStore
from ..documents.versions import SaveResult
from ..identity.cache import IdentityCache
from ..tasks.task_list import TaskBook
from .note_poster import NotePoster
from .registry import ToolContext


@dataclass
class AgentToolContext(ToolContext):
    memory: DocumentStore  # the agent's documents (memory, soul, tasks, self-context)
    agent: IdentityCache
    admin: IdentityCache | None
    files_root: Path  # <data dir>/memory: the only folder read_file/write_file may touch
    tasks: TaskBook | None = None  # the task tools say "not available" until the service gives one
    notes: NotePoster | None = None  # post_note, likewise
    relays_in_use: tuple[str, ...] = ()  # the relays the agent reads and publishes to (embedded included)
    embedded_relay: str | None = None  # which of them is the embedded relay
    # The app's one save path (DocumentSync.save_coalescing: refusals noted, newer versions fetched); a bare
    # context (unit tests, the bench) saves straight through the store.
    save_memory: Callable[[DocumentKey, str], Awaitable[SaveResult]] | None = None
    # The same path for a change of part of a document (memory_insert, memory_replace): ``derive(value in use)``
    # under the document's save lock (DocumentSync.update without waiting for the clock).
    change_memory: Callable[[DocumentKey, Callable[[Any], Any]], Awaitable[SaveResult]] | None = None
    # Whom the turn is for (a guest's copy of the context is made per turn): what a tool shows may depend on it.
    audience: TurnAudience = ADMIN_TURN

    def __post_init__(self) -> None:
        if self.save_memory is None:
            self.save_memory = self.memory.save_text
        if self.change_memory is None:
            store = self.memory
            self.change_memory = lambda key, derive: store.save(key, None, derive=derive)
