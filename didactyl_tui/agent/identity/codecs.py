"""The self-context the agent publishes as documents: its profile (kind 0), contact list (kind 3) and relay list
(kind 10002). Public by nature; other clients may edit them, so every tag they add is kept."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...config_file import relay_url_problem
from ...nostr.event import Event
from ...nostr.keys import is_hex_pubkey
from ..documents.codec import PUBLIC_MAX_BYTES, DocumentCodec, DocumentError, Encoded, check_size
from ..documents.keys import DocumentKey
from ..documents.lineage import PREV_TAG


class ProfileCodec(DocumentCodec[dict[str, Any]]):
    """Kind 0: a JSON object (name, about, picture, nip05…); edited as that object, one field a line."""

    key = DocumentKey.PROFILE
    limit_chars = PUBLIC_MAX_BYTES
    writes_base = False

    def empty(self) -> dict[str, Any]:
        return {}

    def _object(self, text: str, where: str) -> dict[str, Any]:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise DocumentError(f"{where}: the profile is not valid JSON", "Profile") from None
        if not isinstance(data, dict):
            raise DocumentError(f"{where}: the profile must be a JSON object", "Profile")
        return data

    def from_text(self, text: str, current: dict[str, Any], now: int) -> dict[str, Any]:
        check_size(self.title, text, self.limit_chars, PUBLIC_MAX_BYTES)
        return self._object(text, "the edited profile")

    def to_text(self, value: dict[str, Any]) -> str:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1) + "\n"

    def encode(self, value: dict[str, Any]) -> Encoded:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        check_size(self.title, text, PUBLIC_MAX_BYTES, PUBLIC_MAX_BYTES)
        return Encoded(text)

    def decode(self, plaintext: str, ev: Event) -> dict[str, Any]:
        return self._object(plaintext, self.where(ev))


@dataclass(frozen=True, slots=True)
class TagList:
    """A contact list (kind 3) or relay list (kind 10002): the event's tags, as they are, and its content (kind 3's
    may hold a legacy relay map). Every tag is kept: a client that added one must not lose it to us."""

    tags: tuple[tuple[str, ...], ...] = ()
    content: str = ""

    def values(self, name: str) -> list[str]:
        return [t[1] for t in self.tags if len(t) >= 2 and t[0] == name]


class TagListCodec(DocumentCodec[TagList]):
    """Contacts (``p`` tags) and the relay list (``r`` tags), edited as ``{"content": …, "tags": [...]}`` with one
    tag a line, so a line merge adds or drops one entry."""

    limit_chars = PUBLIC_MAX_BYTES
    writes_base = False

    def __init__(self, key: DocumentKey) -> None:
        self.key = key
        self._letter = "p" if key is DocumentKey.CONTACTS else "r"

    def empty(self) -> TagList:
        return TagList()

    def from_text(self, text: str, current: TagList, now: int) -> TagList:
        check_size(self.title, text, self.limit_chars, PUBLIC_MAX_BYTES)
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise DocumentError(f"the {self.title.lower()} is not valid JSON", self.title) from None
        if not isinstance(data, dict) or not isinstance(data.get("tags", []), list) \
                or not isinstance(data.get("content", ""), str):
            raise DocumentError(f'the {self.title.lower()} must be {{"content": "…", "tags": [[…], …]}}', self.title)
        tags: list[tuple[str, ...]] = []
        for n, tag in enumerate(data.get("tags", []), 1):
            if not isinstance(tag, list) or not tag or not all(isinstance(x, str) for x in tag):
                raise DocumentError(f"tag #{n} must be a list of strings", self.title)
            if tag[0] == self._letter:
                self._check_entry(tag, n)
            tags.append(tuple(tag))
        return TagList(tuple(tags), data.get("content", ""))

    def _check_entry(self, tag: list[str], n: int) -> None:
        if len(tag) < 2:
            raise DocumentError(f"tag #{n} has no value", self.title)
        if self._letter == "p" and not is_hex_pubkey(tag[1]):
            raise DocumentError(f"tag #{n}: {tag[1][:70]!r} is not a public key (64 hex characters)", self.title)
        if self._letter == "r":
            problem = relay_url_problem(tag[1])
            if problem:
                raise DocumentError(f"tag #{n}: {tag[1][:70]!r} {problem}", self.title)
            if len(tag) >= 3 and tag[2] not in ("read", "write"):
                raise DocumentError(f"tag #{n}: the marker must be read or write, not {tag[2][:20]!r}", self.title)

    def to_text(self, value: TagList) -> str:
        rows = ",\n".join(" " + json.dumps(list(t), ensure_ascii=False) for t in value.tags)
        head = '{"content": ' + json.dumps(value.content, ensure_ascii=False) + ', "tags": ['
        return f"{head}\n{rows}\n]}}\n" if rows else f"{head}]}}\n"

    def encode(self, value: TagList) -> Encoded:
        size = len(value.content.encode("utf-8", "surrogatepass")) + sum(len(x) for t in value.tags for x in t)
        if size > PUBLIC_MAX_BYTES:
            raise DocumentError(f"the {self.title.lower()} is about {size:,} bytes; at most {PUBLIC_MAX_BYTES:,} "
                                "fit in one event", self.title)
        return Encoded(value.content, value.tags)

    def decode(self, plaintext: str, ev: Event) -> TagList:
        return TagList(tuple(tuple(t) for t in ev.tags if not (t and t[0] == PREV_TAG)), plaintext)
