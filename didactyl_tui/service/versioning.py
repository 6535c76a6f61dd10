"""What every self-document's history offers the views — memory, soul and tasks alike: one version by id
(or prefix), the diff of two, and rollback (the older text saved again through the document's one save path,
a new version; history is never rewritten)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..agent.memory.history import unified_diff
from ..errors import AgentError
from .labels import short_id
from .views import MemoryVersionView

R = TypeVar("R")


def pick_version(versions: list[MemoryVersionView], event_id: str, what: str) -> MemoryVersionView:
    """The version ``event_id`` (or an unambiguous prefix of at least 4 characters) of ``versions``."""
    wanted = event_id.strip().lower()
    exact = [v for v in versions if v.event_id == wanted]
    found = exact or ([v for v in versions if v.event_id.startswith(wanted)] if len(wanted) >= 4 else [])
    if len(found) != 1:
        state = "is ambiguous" if found else "is not"
        raise AgentError(f"{event_id!r} {state} in the {what} history", "Memory history")
    return found[0]


async def diff_versions(old: MemoryVersionView, new: MemoryVersionView) -> str:
    """A unified diff of two versions' texts (empty when equal); decrypting is work: off the loop."""
    return await asyncio.to_thread(lambda: unified_diff(old.content, new.content, old_label=old.label,
                                                        new_label=new.label))


async def roll_back(version: MemoryVersionView, what: str, save: Callable[[str], Awaitable[R]],
                    annotate: Callable[[str, str], Awaitable[Any]], saved_id: Callable[[R], str]) -> R:
    """Save ``version``'s text again as a new version and note the rollback in the history."""
    if version.current:
        raise AgentError(f"version {short_id(version.event_id)} is already the current {what}", "Rollback")
    content = await asyncio.to_thread(lambda: version.content)  # a big payload decrypts off the loop
    result = await save(content)
    await annotate(saved_id(result), f"rollback to {short_id(version.event_id)}")
    return result
