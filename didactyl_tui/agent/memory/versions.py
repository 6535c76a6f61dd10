"""The memory's value types: which memory (:class:`MemoryType`), what the views see (:class:`MemorySnapshot`),
what a save gave (:class:`SaveResult`), one version seen (:class:`VersionSeen`), and the checks before
anything is signed. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from ...errors import AgentError
from ...nostr import nip44
from ...nostr.event import Event
from ...nostr.results import Disposition, PublishOutcome

if TYPE_CHECKING:
    from ..self_documents import SelfDocument

NIP44_MAX_BYTES = nip44.MAX_PLAINTEXT_BYTES


class MemoryType(str, Enum):
    SHORT_TERM = "short_term"
    LONG_TERM = "long_term"

    @property
    def d_tag(self) -> str:
        return f"{self.value}_memory"

    @property
    def title(self) -> str:
        return "Short-Term Memory" if self is MemoryType.SHORT_TERM else "Long-Term Memory"

    @classmethod
    def parse(cls, value: Any) -> MemoryType:
        """``"short_term"``/``"long_term"`` (or the d tag) → MemoryType; anything else is an AgentError."""
        if isinstance(value, MemoryType):
            return value
        for t in cls:
            if value in (t.value, t.d_tag):
                return t
        raise AgentError(f"memory type must be 'short_term' or 'long_term', not {value!r}", "Memory")

    @classmethod
    def from_d_tag(cls, d: str) -> MemoryType | None:
        for t in cls:
            if t.d_tag == d:
                return t
        return None


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """One memory as the app knows it now. ``relays``: the relays known to hold this exact version. (The soul
    and the task list are shown the same way: their ``type`` is a SelfDocument.)"""

    type: MemoryType | SelfDocument
    content: str
    limit_chars: int
    event_id: str | None
    created_at: int | None
    relays: tuple[str, ...]
    loaded: bool  # filled from the relays (or by a save); False: not fetched yet, or no relay answered
    # A newer version that does not decrypt with this key: (event id, relay url or ""); kept out, shown.
    unreadable: tuple[str, str] | None = None

    @property
    def chars(self) -> int:
        return len(self.content)

    @property
    def utf8_bytes(self) -> int:
        return len(self.content.encode("utf-8", "surrogatepass"))

    @property
    def over_limit(self) -> bool:
        return self.chars > self.limit_chars or self.utf8_bytes > NIP44_MAX_BYTES


@dataclass(frozen=True, slots=True)
class SaveResult:
    type: MemoryType | SelfDocument
    event_id: str  # "" when ``deferred`` (nothing signed yet)
    outcome: PublishOutcome
    created_at: int = 0
    snapshot: MemorySnapshot | None = None
    deferred: bool = False  # a burst of saves: kept here, the newest is signed and sent within seconds

    @property
    def any_accepted(self) -> bool:
        return self.outcome.any_accepted

    @property
    def refused(self) -> bool:
        """Every relay answered, and every one refused it for good: it is not resent."""
        results = self.outcome.results.values()
        return bool(results) and all(v.disposition in (Disposition.REFUSED, Disposition.REPLACED) for v in results)

    def to_json_dict(self) -> dict[str, Any]:
        """The ``didactyl memory save --json`` shape (and the memory_save tool's result)."""
        return {
            "type": self.type.value,
            "event_id": self.event_id,
            "created_at": self.created_at,
            "accepted_by": self.outcome.accepted_by,
            "deferred": self.deferred,
            "refused": self.refused,
            "relays": {
                url: {"verdict": v.verdict.value, "message": v.message} for url, v in self.outcome.results.items()
            },
        }


@dataclass(frozen=True, slots=True)
class VersionSeen:
    """One version of a memory the store has seen: from a relay (``remote``) or saved here (``local``)."""

    type: MemoryType
    event: Event
    origin: str  # "local" | "remote"
    url: str | None  # the relay it came from (None: a local save, or no relay named)
    became_current: bool  # the store now shows this version
    replaced: Event | None  # the version it replaced, when it became current
    content: str | None  # the decrypted text when it became current (never stored by the store)
    unreadable: bool = False  # does not decrypt with this key (kept out of the cache, recorded, shown)


class DatedAheadError(AgentError):
    """A save would have to be dated further ahead of the clock than allowed (nothing published)."""

    kept_event_id = ""  # the unpublished version kept in the history (its text is not lost)


def validate_memory_content(t: MemoryType, content: Any, limit_chars: int) -> str:
    """The checks before anything is signed. Returns the content; raises AgentError with a clear reason."""
    if not isinstance(content, str):
        raise AgentError(f"{t.title} content must be text", "Memory")
    if len(content) > limit_chars:
        raise AgentError(
            f"{t.title} is {len(content):,} characters; the limit is {limit_chars:,}. "
            "Shorten it and save again (nothing was published).",
            "Memory over limit",
        )
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise AgentError(f"{t.title} holds characters that cannot be encoded as UTF-8", "Memory") from None
    if size > NIP44_MAX_BYTES:
        raise AgentError(
            f"{t.title} is {size:,} UTF-8 bytes; NIP-44 allows at most {NIP44_MAX_BYTES:,}. "
            "Shorten it and save again (nothing was published).",
            "Memory over limit",
        )
    return content
