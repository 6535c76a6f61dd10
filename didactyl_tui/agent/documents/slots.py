"""One document's place in the store: the version in use (its value and text), the newest date seen, which
version each relay showed, and the newest version that does not read. A slot changes only through the store."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ...nostr.event import Event
from ...nostr.replaceable import is_newer, is_newer_version
from .codec import DocumentError, UndecryptableError
from .keys import DocumentKey
from .versions import DocumentSnapshot, Unusable


@dataclass
class Slot:
    value: Any
    text: str
    event: Event | None = None  # the version in use
    loaded: bool = False
    floor_created_at: int = 0  # newest created_at seen for this document, even of a version that does not read
    relay_versions: dict[str, tuple[str, int]] = field(default_factory=dict)  # url -> (event id, created_at)
    # The newest version newer than ``event`` that does not read: (event, relay, why).
    unreadable: tuple[Event, str, DocumentError] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # saves of one document, one at a time

    @property
    def floor(self) -> int:
        """The newest date known of this document (a new version is dated after it)."""
        return max(self.floor_created_at, self.event.created_at if self.event else 0)

    def note_relay(self, url: str | None, ev: Event) -> None:
        """``url`` showed us ``ev`` (kept when it is the newest that relay showed)."""
        if not url:
            return
        known = self.relay_versions.get(url)
        if known is None or is_newer_version(ev.created_at, ev.id, known[1], known[0]):
            self.relay_versions[url] = (ev.id, ev.created_at)

    def adopt(self, ev: Event, value: Any, text: str) -> None:
        """``ev`` is the version in use from now on."""
        self.event, self.value, self.text, self.loaded = ev, value, text, True
        self.floor_created_at = max(self.floor_created_at, ev.created_at)
        if self.unreadable is not None and not is_newer(self.unreadable[0], ev):
            self.unreadable = None  # superseded: nothing unusable is newer than the version in use any more

    def snapshot(self, key: DocumentKey, limit_chars: int, max_bytes: int) -> DocumentSnapshot:
        ev = self.event
        holders: tuple[str, ...] = ()
        if ev is not None:
            holders = tuple(sorted(u for u, (eid, _) in self.relay_versions.items() if eid == ev.id))
        unusable = None
        if self.unreadable is not None:
            bad, relay, error = self.unreadable
            unusable = Unusable(bad.id, relay, error.message, isinstance(error, UndecryptableError))
        return DocumentSnapshot(key, self.text, limit_chars, ev.id if ev else None,
                                ev.created_at if ev else None, holders, self.loaded, unusable, self.value, max_bytes)
