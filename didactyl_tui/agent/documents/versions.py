"""The value types of the document model: what the views see of a document (:class:`DocumentSnapshot`), what a
save gave (:class:`SaveResult`), one version seen (:class:`VersionSeen`), where a prompt section came from
(:class:`SourceEvent`). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import AgentError
from ...nostr.event import Event
from ...nostr.results import Disposition, PublishOutcome
from .codec import NIP44_MAX_BYTES, DocumentError
from .keys import DocumentKey


@dataclass(frozen=True, slots=True)
class SourceEvent:
    """The Nostr event a prompt section's content came from (a document's version, a cached profile or note), and
    the relays known to hold it."""

    event_id: str
    created_at: int
    relays: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Unusable:
    """A version newer than the one in use that cannot be used: it does not decrypt, parse or pass the checks."""

    event_id: str
    relay: str  # where it came from ("" when not known)
    reason: str
    undecryptable: bool = False  # the content does not decrypt (else: it decrypts but does not parse or check)


@dataclass(frozen=True, slots=True)
class DocumentSnapshot:
    """One document as the app knows it now. ``content``: its text (what a person reads and edits); ``value``: what
    the text means (a soul template, a task list…); ``relays``: the relays known to hold this exact version."""

    type: DocumentKey
    content: str
    limit_chars: int
    event_id: str | None
    created_at: int | None
    relays: tuple[str, ...]
    loaded: bool  # filled from the relays (or by a save); False: not fetched yet, or no relay answered
    unreadable: Unusable | None = None  # a newer version kept out (shown until a save replaces it)
    value: Any = None
    max_bytes: int = NIP44_MAX_BYTES  # the text's UTF-8 bound (40,960 when the key is in a remote signer)

    @property
    def chars(self) -> int:
        return len(self.content)

    @property
    def utf8_bytes(self) -> int:
        return len(self.content.encode("utf-8", "surrogatepass"))

    @property
    def over_limit(self) -> bool:
        return self.chars > self.limit_chars or self.utf8_bytes > self.max_bytes

    @property
    def known(self) -> bool:
        """The value is the newest that can be known: a version was read, or the relays hold none that could not
        be. False when the only versions known cannot be used: a change derived from the value (a task added) would
        publish over what it cannot see."""
        return self.loaded and (self.event_id is not None or self.unreadable is None)

    def check_changeable(self) -> None:
        """DocumentError unless a change can be derived from the value (it is :attr:`known`): nothing is lost."""
        key = self.type
        if not self.loaded:
            raise DocumentError(
                f"the {key.title.lower()} could not be read from any relay yet (none answered): it is not "
                "changed, so nothing in it is lost; try again when a relay is reachable", key.title)
        if not self.known:
            bad = self.unreadable
            raise DocumentError(
                f"the {key.title.lower()}'s newest version (event {bad.event_id[:12] if bad else '?'}) cannot "
                f"be used ({bad.reason if bad else 'unknown'}) and no earlier version is known here: it is not "
                "changed, so nothing in it is lost; replace it as a whole to go on", key.title)


@dataclass(frozen=True, slots=True)
class SaveResult:
    type: DocumentKey
    event_id: str  # "" when ``deferred`` (nothing signed yet)
    outcome: PublishOutcome
    created_at: int = 0
    snapshot: DocumentSnapshot | None = None
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
    """One version of a document the store has seen: from a relay (``remote``) or saved here (``local``)."""

    type: DocumentKey
    event: Event
    origin: str  # "local" | "remote"
    url: str | None  # the relay it came from (None: a local save, or no relay named)
    became_current: bool  # the store now shows this version
    replaced: Event | None  # the version it replaced, when it became current
    content: str | None  # its text when it became current (never stored by the store)
    unusable: str | None = None  # why it cannot be used (kept out of the cache, recorded, shown)


class DatedAheadError(AgentError):
    """A save would have to be dated further ahead of the clock than allowed (nothing published)."""

    kept_event_id = ""  # the unpublished version kept in the history (its text is not lost)


class NewerVersionKnown(AgentError):
    """A save was refused: another writer's newer version is known (nothing published, the text kept)."""
