"""Per-relay results: what each relay said, never a single raise on the first failure."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ..terminal_text import one_line
from .messages import Prefix


class Verdict(str, Enum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    TIMEOUT = "timeout"
    NOT_CONNECTED = "not_connected"


class Disposition(str, Enum):
    """What a publisher does next with one relay, given its answer."""

    HELD = "accepted"  # the relay holds the event (accepted it, or already had it)
    REPLACED = "replaced"  # the relay holds a newer version of the address: ours is never stored there
    REFUSED = "refused"  # a refusal that will not change on retry (invalid, blocked, pow, ...)
    RETRY = "retry"  # worth trying again later (timeouts, not connected, error:, rate-limited:, ...)


# Refusals that will not change on retry. (AUTH_REQUIRED is retried: the client signs in when it can.)
_FINAL = frozenset({Prefix.INVALID, Prefix.BLOCKED, Prefix.POW, Prefix.RESTRICTED, Prefix.MUTE})


@dataclass(frozen=True, slots=True)
class RelayVerdict:
    """One relay's answer to one publish.

    ``message`` is the relay's OK reason as sent (data from outside: never shown unsanitised) or,
    for TIMEOUT/NOT_CONNECTED, our own words. ``prefix`` is the reason's machine-readable prefix;
    it is read from ``message`` when not given, and only for answers that came from the relay.
    """

    url: str
    verdict: Verdict
    message: str = ""
    prefix: Prefix | None = None

    def __post_init__(self) -> None:
        if self.prefix is None and self.verdict in (Verdict.ACCEPTED, Verdict.REJECTED):
            object.__setattr__(self, "prefix", Prefix.of(self.message))

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPTED

    @property
    def disposition(self) -> Disposition:
        if self.verdict is Verdict.ACCEPTED or (
            self.verdict is Verdict.REJECTED and self.prefix is Prefix.DUPLICATE
        ):
            return Disposition.HELD
        if self.verdict is Verdict.REJECTED and self.prefix is Prefix.REPLACED:
            return Disposition.REPLACED
        if self.verdict is Verdict.REJECTED and self.prefix in _FINAL:
            return Disposition.REFUSED
        return Disposition.RETRY


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
        """e.g. ``accepted by 2/3 relays (wss://a: rejected: blocked)``: one line, the relays' reasons
        stripped of control characters and escape sequences (they are outside text)."""
        total = len(self.results)
        ok = len(self.accepted_by)
        bad = [f"{u}: {r.verdict.value}{(': ' + one_line(r.message)) if r.message else ''}"
               for u, r in self.results.items() if not r.accepted]
        text = f"accepted by {ok}/{total} relays"
        return text + (f" ({'; '.join(bad)})" if bad else "")


class ConnectionState(str, Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"  # waiting before the next reconnect attempt
    CLOSED = "closed"  # closed by us, for good
