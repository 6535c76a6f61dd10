"""The soul as the views see it: the template in use and the version it came from.

The soul is one of the agent's documents (kind 31120, docs/soul-event.md): read, saved, versioned and repaired like
memory (service/documents.py). Until the relays hold a soul that reads, the configured one (config, soul file or
built-in) is in use; it is published once at start when the relays answered and hold none at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..agent.documents.versions import DocumentSnapshot
from ..agent.soul.content import soul_to_json
from ..agent.soul.template import SoulTemplate
from ..nostr.event import Event


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
