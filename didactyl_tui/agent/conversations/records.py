"""Conversations as portable records (the backup bundle's ``sessions``), out of and back into the store.

A record is ``{"id", "title", "created_at", "updated_at", "messages"}`` with OpenAI-format messages,
oldest first, and ``"agent"`` (hex) for a conversation with an agent elsewhere (``didactyl attach``).
Synchronous like the store: the service calls these through ``asyncio.to_thread``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .store import ConversationStore


def export_records(store: ConversationStore) -> list[dict[str, Any]]:
    """Every session of ``store`` as a record, newest first (the store's listing order)."""
    return [{"id": i.id, "title": i.title, "created_at": i.created_at, "updated_at": i.updated_at,
             "messages": store.messages(i.id), **({"agent": i.agent} if i.agent else {})}
            for i in store.list_sessions()]


def restore_records(store: ConversationStore, records: Iterable[Mapping[str, Any]]) -> int:
    """Recreate :func:`export_records` output in ``store`` (oldest first, so equal times list in the same
    order); an id already in the store is refused (``AgentError``), so an import never overwrites."""
    items = list(records)
    for r in reversed(items):
        store.restore_session(r["id"], r["title"], r["created_at"], r["updated_at"], r["messages"],
                              agent=r.get("agent"))
    return len(items)
