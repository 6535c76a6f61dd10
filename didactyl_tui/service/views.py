"""How the views (TUI, CLI) see the outbox, a document's history and relay consensus."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..agent.documents.keys import DocumentKey
from ..agent.documents.outbox import RELAY_ACCEPTED, classify_verdict
from ..errors import AgentError
from ..nostr.event import Event
from ..nostr.results import RelayVerdict
from ..terminal_text import one_line
from .labels import short_id, when


@dataclass(frozen=True, slots=True)
class PendingPublish:
    """A document's version some relay still needs (from the outbox)."""

    type: DocumentKey
    event_id: str
    created_at: int
    state: str  # "pending" (no relay took it yet) | "delivered" (some did) | "unsaved" (outbox not writable)
    attempts: int
    next_attempt_at: float
    accepted_by: tuple[str, ...]
    waiting_for: tuple[str, ...]  # relays it is still being sent to
    last_error: str

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value, "event_id": self.event_id, "created_at": self.created_at,
            "state": self.state, "attempts": self.attempts, "next_attempt_at": round(self.next_attempt_at, 3),
            "accepted_by": list(self.accepted_by), "waiting_for": list(self.waiting_for),
            "last_error": self.last_error,
        }

    def describe(self) -> str:
        """One line, e.g. ``event 1a2b3c4d: pending, 3 attempts, waiting for ws://a (retry: timeout)``."""
        parts = [f"event {short_id(self.event_id)}: {self.state}",
                 f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"]
        if self.waiting_for:
            parts.append("waiting for " + ", ".join(self.waiting_for))
        text = ", ".join(parts)
        return f"{text} ({one_line(self.last_error)})" if self.last_error else text


@dataclass(frozen=True, slots=True)
class DocumentVersionView:
    """One version in a document's history, as read when the history was listed (``text`` None: it does not
    read, and ``problem`` says why)."""

    type: DocumentKey
    event_id: str
    created_at: int
    origin: str  # "local" (saved on this device) | "remote" (seen on a relay)
    note: str
    seen_at: float
    current: bool  # the version in use now
    event: Event = field(repr=False, compare=False)
    text: str | None = field(default=None, repr=False, compare=False)
    problem: str = ""

    @property
    def label(self) -> str:
        return f"{short_id(self.event_id)} ({when(self.created_at)})"

    @property
    def content(self) -> str:
        """The version's text; AgentError saying why when it does not read."""
        if self.text is None:
            raise AgentError(f"version {short_id(self.event_id)} cannot be read: {self.problem}", "History")
        return self.text

    def to_json_dict(self) -> dict[str, Any]:
        """For ``didactyl memory history --json``: sizes, never the text."""
        text = self.text
        return {
            "event_id": self.event_id, "created_at": self.created_at, "origin": self.origin, "note": self.note,
            "current": self.current, "seen_at": round(self.seen_at, 3),
            "chars": len(text) if text is not None else None,
            "utf8_bytes": len(text.encode("utf-8", "surrogatepass")) if text is not None else None,
            "problem": self.problem or None,
        }


@dataclass(frozen=True, slots=True)
class RelayDocumentStatus:
    """Which version of one document one relay holds."""

    url: str
    reachable: bool  # answered the query completely
    event_id: str | None  # what it held when asked (None: no version)
    created_at: int | None
    lagging: bool  # reachable, and held an older version or none
    republished: RelayVerdict | None  # the answer to bringing it up to date (None: not needed or not tried)
    acknowledged_not_serving: bool = False  # said OK to the newest version, but does not serve it by id

    @property
    def current(self) -> bool:
        """Holds the newest version now (held it already, or took it just now)."""
        if not self.reachable or self.acknowledged_not_serving:
            return False
        if not self.lagging:
            return True
        return self.republished is not None and classify_verdict(
            self.republished.verdict, self.republished.message) == RELAY_ACCEPTED

    def describe(self) -> str:
        if not self.reachable:
            return "unreachable"
        held = f"{short_id(self.event_id)} ({when(self.created_at)})" if self.event_id else "no version"
        if self.acknowledged_not_serving:
            return f"{held}: acknowledged but not serving the newest version"
        if not self.lagging:
            return f"{held}: current" if self.event_id else held
        if self.republished is None:
            return f"{held}: lagging"
        if self.current:
            return f"{held}: was lagging, brought up to date"
        reason = f": {one_line(self.republished.message)}" if self.republished.message else ""
        return f"{held}: lagging, not updated ({self.republished.verdict.value}{reason})"

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "reachable": self.reachable, "event_id": self.event_id, "created_at": self.created_at,
            "lagging": self.lagging, "current": self.current,
            "acknowledged_not_serving": self.acknowledged_not_serving,
            "republished": None if self.republished is None else {
                "verdict": self.republished.verdict.value, "message": self.republished.message},
        }


@dataclass(frozen=True, slots=True)
class DocumentStatus:
    """Per relay, which version of a document it holds; lagging relays were offered the newest."""

    type: DocumentKey
    newest_event_id: str | None
    newest_created_at: int | None
    relays: tuple[RelayDocumentStatus, ...]
    pending: tuple[PendingPublish, ...]

    @property
    def any_reachable(self) -> bool:
        return any(r.reachable for r in self.relays)

    @property
    def brought_up_to_date(self) -> list[str]:
        return [r.url for r in self.relays if r.lagging and r.current]

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value, "newest_event_id": self.newest_event_id,
            "newest_created_at": self.newest_created_at,
            "relays": {r.url: r.to_json_dict() for r in self.relays},
            "brought_up_to_date": self.brought_up_to_date,
            "pending": [p.to_json_dict() for p in self.pending],
        }
