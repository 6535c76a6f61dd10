"""NIP-01 events: canonical serialization, id, signing, verification, tag helpers.

Pure and deterministic: signing takes ``created_at`` from the caller (no hidden clock).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import NostrError
from .keys import SecretKey, verify_signature

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX128 = re.compile(r"^[0-9a-f]{128}$")

Tags = tuple[tuple[str, ...], ...]

# One encoder for every canonical serialization: json.dumps with options builds a new one per call.
_CANONICAL = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def serialize_for_id(pubkey: str, created_at: int, kind: int, tags: Sequence[Sequence[str]], content: str) -> str:
    """The NIP-01 canonical form ``[0,pubkey,created_at,kind,tags,content]``.

    ``json.dumps`` with no spaces and ``ensure_ascii=False`` escapes exactly what NIP-01 (and
    JavaScript's ``JSON.stringify``) escape: ``"``, ``\\``, and control characters
    (``\\n \\r \\t \\b \\f`` by name, the rest as ``\\u00XX``); everything else is verbatim UTF-8.
    """
    return _CANONICAL.encode([0, pubkey, created_at, kind, tags, content])  # tuples encode as arrays


def compute_id(pubkey: str, created_at: int, kind: int, tags: Sequence[Sequence[str]], content: str) -> str:
    data = serialize_for_id(pubkey, created_at, kind, tags, content)
    try:
        raw = data.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates cannot be serialized canonically
        raise NostrError("event text holds characters that cannot be encoded as UTF-8") from exc
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True, slots=True)
class Event:
    id: str
    pubkey: str
    created_at: int
    kind: int
    tags: Tags
    content: str
    sig: str

    # --- (de)serialization --------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any) -> Event:
        """Build from the wire shape, checking types and formats (not the id or signature)."""
        if not isinstance(data, Mapping):
            raise NostrError("an event must be a JSON object")
        try:
            eid, pubkey, sig = data["id"], data["pubkey"], data["sig"]
            created_at, kind = data["created_at"], data["kind"]
            tags, content = data["tags"], data["content"]
        except KeyError as exc:
            raise NostrError(f"event is missing the field {exc.args[0]!r}") from None
        if not isinstance(eid, str) or not _HEX64.match(eid):
            raise NostrError("event id must be 64 lowercase hex characters")
        if not isinstance(pubkey, str) or not _HEX64.match(pubkey):
            raise NostrError("event pubkey must be 64 lowercase hex characters")
        if not isinstance(sig, str) or not _HEX128.match(sig):
            raise NostrError("event sig must be 128 lowercase hex characters")
        if isinstance(created_at, bool) or not isinstance(created_at, int) or created_at < 0:
            raise NostrError("event created_at must be a non-negative integer")
        if isinstance(kind, bool) or not isinstance(kind, int) or not 0 <= kind <= 65535:
            raise NostrError("event kind must be an integer in 0..65535")
        if not isinstance(content, str):
            raise NostrError("event content must be a string")
        if not isinstance(tags, list) or not all(
            isinstance(t, list) and all(isinstance(x, str) for x in t) for t in tags
        ):
            raise NostrError("event tags must be a list of lists of strings")
        return cls(eid, pubkey, created_at, kind, tuple(tuple(t) for t in tags), content, sig)

    @classmethod
    def from_json(cls, text: str | bytes) -> Event:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise NostrError("event is not valid JSON") from exc
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pubkey": self.pubkey,
            "created_at": self.created_at,
            "kind": self.kind,
            "tags": [list(t) for t in self.tags],
            "content": self.content,
            "sig": self.sig,
        }

    def to_json(self) -> str:
        return _CANONICAL.encode(self.to_dict())

    def approx_bytes(self) -> int:
        """About the size of its JSON (content and tags counted, the fixed fields as a constant): for byte
        bounds, without serializing."""
        return 320 + len(self.content) + sum(len(value) + 4 for tag in self.tags for value in tag)

    # --- verification -------------------------------------------------------------------
    def computed_id(self) -> str:
        return compute_id(self.pubkey, self.created_at, self.kind, self.tags, self.content)

    def check(self) -> None:
        """Raise :class:`NostrError` (``invalid: …``) if the id or the signature is wrong."""
        if self.computed_id() != self.id:
            raise NostrError("invalid: event id does not match its content")
        if not verify_signature(self.pubkey, bytes.fromhex(self.id), bytes.fromhex(self.sig)):
            raise NostrError("invalid: bad signature")

    def is_valid(self) -> bool:
        try:
            self.check()
        except NostrError:
            return False
        return True

    # --- tags ---------------------------------------------------------------------------
    def tag_values(self, name: str) -> list[str]:
        """The first values of every tag called ``name`` (e.g. all ``p`` pubkeys)."""
        return [t[1] for t in self.tags if len(t) >= 2 and t[0] == name]

    def first_tag(self, name: str) -> str | None:
        for t in self.tags:
            if len(t) >= 2 and t[0] == name:
                return t[1]
        return None

    @property
    def d_tag(self) -> str:
        """The ``d`` identifier of an addressable event ("" when absent, as NIP-01 says)."""
        return self.first_tag("d") or ""


def sign_event(
    sk: SecretKey,
    *,
    kind: int,
    content: str,
    created_at: int,
    tags: Iterable[Sequence[str]] = (),
) -> Event:
    """Build and sign an event. ``created_at`` is passed in (pure, reproducible)."""
    tag_tuple: Tags = tuple(tuple(str(x) for x in t) for t in tags)
    pubkey = sk.public_key_hex
    eid = compute_id(pubkey, created_at, kind, tag_tuple, content)
    sig = sk.sign(bytes.fromhex(eid)).hex()
    return Event(eid, pubkey, created_at, kind, tag_tuple, content, sig)
