"""The base tool registry: every built-in tool, declared once in its family's module.

Order is the order offered to the model: memory, self-context, admin-context, file memory, tasks, notes.
Without an admin the admin tools stay registered but internal (never offered), so the soul's admin
sections are skipped with a clear reason instead of naming unknown tools; the task tools and post_note do
the same until the caller has a task book / note poster to give them (``tasks=True``, ``notes=True``).
Memory-backend tools are not here: the service offers them after these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .admin_context import ADMIN_CONTEXT_TOOLS
from .files import FILE_TOOLS
from .memory import MEMORY_TOOLS
from .notes import NOTE_TOOLS
from .registry import Tool, ToolRegistry
from .self_context import SELF_CONTEXT_TOOLS
from .tasks import TASK_TOOLS


def _internal(tools: Iterable[Tool]) -> tuple[Tool, ...]:
    return tuple(dataclasses.replace(t, visible=False) for t in tools)


def build_base_registry(*, admin: bool = False, tasks: bool = False, notes: bool = False,
                        offer_aliases: bool = False) -> ToolRegistry:
    """A fresh registry of the built-in tools (admin tools offered only with ``admin``, task tools with
    ``tasks``, post_note with ``notes``; ``offer_aliases`` also offers ``my_contacts`` and the other aliases
    as tools of their own)."""
    registry = ToolRegistry(offer_aliases=offer_aliases)
    admin_tools = ADMIN_CONTEXT_TOOLS if admin else _internal(ADMIN_CONTEXT_TOOLS)
    task_tools = TASK_TOOLS if tasks else _internal(TASK_TOOLS)
    note_tools = NOTE_TOOLS if notes else _internal(NOTE_TOOLS)
    for family in (MEMORY_TOOLS, SELF_CONTEXT_TOOLS, admin_tools, FILE_TOOLS, task_tools, note_tools):
        for tool in family:
            registry.register(tool)
    return registry
