"""The soul as the views see it: the template in use and the version it came from.

The soul is one of the agent's documents (kind 31120, docs/soul-event.md): read, saved, versioned and repaired like
memory (service/documents.py). Until the relays hold a soul that reads, the configured one (config, soul file or
built-in) is in use; it is published once at start when the relays answered and hold none at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..agent.background import BackgroundTasks
from ..agent.documents.keys import DocumentKey
from ..agent.documents.saving import Value
from ..agent.documents.store import DocumentStore
from ..agent.documents.versions import DocumentSnapshot
from ..agent.soul.content import soul_to_json
from ..agent.soul.template import SoulTemplate
from ..nostr.event import Event
from ..nostr.results import PublishOutcome
from .documents import DocumentService


@dataclass(frozen=True, slots=True)
class SoulView:
    """The soul in use and where it came from."""

    template: SoulTemplate
    event_id: str | None  # the kind 31120 it was read from or published as; None: not on the relays
    created_at: int | None
    encrypted: bool
    relays: tuple[str, ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        """The ``didactyl soul show --json`` shape: the event and the soul document."""
        return {"event_id": self.event_id, "created_at": self.created_at, "encrypted": self.encrypted,
                "source": self.template.source,
                "soul": json.loads(soul_to_json(self.template))}


def soul_view(snap: DocumentSnapshot, event: Event | None) -> SoulView:
    return SoulView(snap.value, snap.event_id, snap.created_at,
                    bool(event is not None and ("encrypted", "nip44") in event.tags), snap.relays)


class SoulService:
    """The soul as the views and commands use it: the one in use and where it came from; publishing a template."""

    def __init__(self, documents: DocumentService, *, store: DocumentStore, tasks: BackgroundTasks,
                 configured: SoulTemplate, warn: Callable[[str], None]) -> None:
        self._documents, self._store, self._tasks, self._warn = documents, store, tasks, warn
        self.configured = configured  # the config's soul (its [[soul.sections]], soul file or the built-in)

    def view(self) -> SoulView:
        """The soul in use, and the version it came from."""
        store = self._store
        return soul_view(store.snapshot(DocumentKey.SOUL), store.current_event(DocumentKey.SOUL))

    async def publish(self, template: SoulTemplate | None = None, *, encrypt: bool = True) -> PublishOutcome:
        """Publish ``template`` (default: the configured soul) as the agent's kind 31120: checked (linted) and saved
        through the one save path, a new version based on the one in use."""
        text = self._store.codec(DocumentKey.SOUL).to_text(template or self.configured)
        return (await self._documents.save(DocumentKey.SOUL, text, encrypt=encrypt)).outcome

    def publish_configured(self) -> None:
        """The configured soul, published once: when the relays answered and hold no soul at all (one that does not
        read is not published over: the user may want to fix it rather than lose it)."""
        documents = self._documents
        snap = documents.snapshot(DocumentKey.SOUL)
        if not snap.loaded or snap.event_id is not None or snap.unreadable is not None:
            return

        async def publish() -> None:
            try:
                await documents.save(DocumentKey.SOUL, Value(self.configured))
            except Exception as exc:  # a bad configured soul, or a newer one arrived: told, never raised
                self._warn(f"the soul was not published: {exc}")

        self._tasks.spawn(publish())
