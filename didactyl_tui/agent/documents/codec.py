"""What differs between documents: how a document's text becomes an event and back.

A :class:`DocumentCodec` is pure (no key, no I/O, no clock): it turns an edit's text into a checked value, a value
into the plaintext and tags of an event, and a version's plaintext back into a value — refusing, with a reason a
person understands, what cannot be used. Encryption, signing, dates, bases, the outbox, history and relay consensus
are the same for every document (see :mod:`.saving`).

Each document's codec lives with its concept (``agent/memory/codec.py``, ``agent/soul/codec.py``,
``agent/tasks/codec.py``, ``agent/identity/codecs.py``); the service assembles the set (``service/parts.py``), so
this package imports nothing above it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ...errors import AgentError
from ...nostr import nip44
from ...nostr.event import Event
from .keys import DocumentKey
from .lineage import PREV_TAG

V = TypeVar("V")

APP_TAG = ("app", "didactyl")
NIP44_MAX_BYTES = nip44.MAX_PLAINTEXT_BYTES
PUBLIC_MAX_BYTES = 65_535  # a public self-context event's content and tags (a relay's frame limit is far above)


class DocumentError(AgentError):
    """A text or a version that cannot be used as the document: the message says why (and names the event)."""

    title = "Document"


class UndecryptableError(DocumentError):
    """A version whose content does not decrypt with this key (another key's, a damaged write)."""


@dataclass(frozen=True, slots=True)
class Encoded:
    """What a value is stored as: the plaintext content and the document's own tags (the store adds ``d``,
    ``app``, ``prev`` and the encryption)."""

    plaintext: str
    tags: tuple[tuple[str, ...], ...] = ()


class DocumentCodec(ABC, Generic[V]):
    """One document's format. Subclasses set ``key`` and ``limit_chars`` and implement the four conversions."""

    key: DocumentKey
    limit_chars: int  # the editor's gauge and the text's bound
    max_bytes: int = NIP44_MAX_BYTES  # the text's UTF-8 bound when encrypted (less through a remote signer)
    # Versions name the one they were edited from (["prev", id], docs/sync.md). Not on the public self-context kinds:
    # other clients copy a contact or relay list's tags when they edit it, and a copied base would be a stale one.
    writes_base: bool = True
    marks_encryption = False  # the content is encrypted iff the event says ["encrypted","nip44"] (the soul)

    @property
    def title(self) -> str:
        return self.key.title

    @abstractmethod
    def empty(self) -> V:
        """The value when no version exists yet."""

    @abstractmethod
    def from_text(self, text: str, current: V, now: int) -> V:
        """An edit's text as a checked value (``current``: the value it was edited from). DocumentError says what
        is wrong; nothing is published then."""

    @abstractmethod
    def to_text(self, value: V) -> str:
        """The form a person reads and edits (and history diffs)."""

    @abstractmethod
    def encode(self, value: V) -> Encoded:
        """The stored form; DocumentError when it would not fit in one event."""

    @abstractmethod
    def decode(self, plaintext: str, ev: Event) -> V:
        """A version's value; DocumentError naming the event when it cannot be used."""

    def is_encrypted(self, ev: Event) -> bool:
        """How a version is read: private documents are NIP-44 to self (an empty one is sent empty)."""
        if not self.key.private:
            return False
        if self.marks_encryption:
            return ("encrypted", "nip44") in ev.tags
        return ev.content != ""

    def tags(self, own: tuple[tuple[str, ...], ...], base: str | None, *, encrypted: bool) -> list[list[str]]:
        """A version's tags: ``d`` and ``app`` (addressable documents), the encryption marker, the document's
        ``own`` tags (a contact list's ``p`` tags), then the base."""
        out: list[list[str]] = []
        if self.key.d_tag:
            out += [["d", self.key.d_tag], list(APP_TAG)]
        if self.marks_encryption and encrypted:
            out.append(["encrypted", "nip44"])
        out += [list(t) for t in own]
        if base and self.writes_base:
            out.append([PREV_TAG, base])
        return out

    def where(self, ev: Event) -> str:
        """How an error names a version: ``soul event 1a2b3c4d5e6f``."""
        return f"{self.title.lower()} event {ev.id[:12]}"


def check_size(title: str, text: str, limit_chars: int, max_bytes: int = NIP44_MAX_BYTES, *,
               heading: str | None = None, bytes_bound: str | None = None) -> str:
    """The bounds every text document has: characters (the gauge) and UTF-8 bytes (what fits in one event; for an
    encrypted document, NIP-44's plaintext limit). ``heading``: the error's title (default "<title> over limit");
    ``bytes_bound``: what sets ``max_bytes``, when it is not NIP-44 or one event (a remote signer)."""
    over = heading or f"{title} over limit"
    if not isinstance(text, str):
        raise DocumentError(f"{title} content must be text", title)
    if len(text) > limit_chars:
        raise DocumentError(f"{title} is {len(text):,} characters; the limit is {limit_chars:,}. "
                            "Shorten it and save again (nothing was published).", over)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise DocumentError(f"{title} holds characters that cannot be encoded as UTF-8", title) from None
    if size > max_bytes:
        limit = (f"{bytes_bound} carries at most {max_bytes:,}" if bytes_bound else
                 f"NIP-44 allows at most {max_bytes:,}" if max_bytes == NIP44_MAX_BYTES else
                 f"at most {max_bytes:,} fit in one event")
        raise DocumentError(f"{title} is {size:,} UTF-8 bytes; {limit}. "
                            "Shorten it and save again (nothing was published).", over)
    return text


def codec_value_error(codec: DocumentCodec[Any], ev: Event, reason: str) -> DocumentError:
    return DocumentError(f"{codec.where(ev)}: {reason}", codec.title)
