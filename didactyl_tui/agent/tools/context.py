"""The context every built-in tool handler receives (injected by the registry, hidden from schemas).

It gives tools the caches, the document store (to read) and the one save path (to write); the only network a tool
can reach goes through those. The service builds one and may subclass it to add more.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..audience import ADMIN_TURN, TurnAudience
from ..documents.saving import DocumentSaves
from ..documents.store import DocumentStore
from ..identity.cache import IdentityCache
from ..tasks.task_list import TaskBook
from .note_poster import NotePoster
from .registry import ToolContext


@dataclass
class AgentToolContext(ToolContext):
    memory: DocumentStore  # the agent's documents (memory, soul, tasks, self-context), as they are now
    saves: DocumentSaves  # THE save path of every document (the editor and the CLI save through it too)
    agent: IdentityCache
    admin: IdentityCache | None
    files_root: Path  # <data dir>/memory: the only folder read_file/write_file may touch
    tasks: TaskBook | None = None  # the task tools say "not available" until the service gives one
    notes: NotePoster | None = None  # post_note, likewise
    relays_in_use: tuple[str, ...] = ()  # the relays the agent reads and publishes to (embedded included)
    embedded_relay: str | None = None  # which of them is the embedded relay
    # Whom the turn is for (a guest's copy of the context is made per turn): what a tool shows may depend on it.
    audience: TurnAudience = ADMIN_TURN
