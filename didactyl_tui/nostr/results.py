"""Per-relay results: what each relay said, never a single raise on the first failure."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Verdict(str, Enum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    TIMEOUT = "timeout"
    NOT_CONNECTED = "not_connected"


@dataclass(frozen=True, slots=True)
class RelayVerdict:
    """One relay's answer to one publish. ``message`` is the relay's OK reason (or ours)."""

    url: str
    verdict: Verdict
    message: str = ""

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPTED


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    """The result of publishing one event to every relay of a pool."""

    event_id: str
    results: dict[str, RelayVerdict] = field(default_factory=dict)

    @property
    def accepted_by(self) -> list[str]:
        return [url for url, r in self.results.items() if r.accepted]

    @property
    def any_accepted(self) -> bool:
        return any(r.accepted for r in self.results.values())

    def summary(self) -> str:
        """e.g. ``accepted by 2/3 relays (wss://a: rejected: blocked)``."""
        total = len(self.results)
        ok = len(self.accepted_by)
        bad = [f"{u}: {r.verdict.value}{(': ' + r.message) if r.message else ''}"
               for u, r in self.results.items() if not r.accepted]
        text = f"accepted by {ok}/{total} relays"
        return text + (f" ({'; '.join(bad)})" if bad else "")


class ConnectionState(str, Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"  # waiting before the next reconnect attempt
    CLOSED = "closed"  # closed by us, for good
