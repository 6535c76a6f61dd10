"""NIP-01 (and NIP-42) wire messages as frozen dataclasses: parse and serialise, nothing else.

Client → relay: ``EVENT``, ``REQ``, ``CLOSE``, ``AUTH``. Relay → client: ``EVENT``, ``OK``, ``EOSE``,
``CLOSED``, ``NOTICE``, ``AUTH``. The relay client, the embedded relay and the test relays all speak
through this module, so the shape of a frame is checked in one place.

Pure: text in, values out. ``EVENT`` messages carry the wire object as received (a JSON object, not
yet checked as an event): whoever receives it decides what a bad event costs (the client counts it,
a relay answers ``OK false``). Reasons (``OK``/``CLOSED``/``NOTICE`` text) are kept exactly as the
peer sent them: they are data from outside, and nothing here shows them to a person.

:func:`sniff_subscription_id` reads the subscription id of an ``EVENT`` frame without parsing the
JSON (the idea of nostr-tools' ``fakejson``), so a client can drop frames for subscriptions it does
not hold before paying for the parse; :func:`sniff_event_id` reads an event id the same way (a hint
for addressing an ``OK``, e.g. to an EVENT too big to parse).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..errors import NostrError
from .event import Event

# Why a frame is not a message; relay.py counts dropped frames under these names.
BAD_JSON = "bad_json"
BAD_MESSAGE = "bad_message"  # JSON, but not the shape of the message its type names
UNKNOWN_MESSAGE = "unknown_message"  # a message type this side never receives
BAD_EVENT = "bad_event"  # an EVENT whose event is not a JSON object


class MessageError(NostrError):
    """A frame that is not a valid message. ``kind`` is one of the constants above."""

    def __init__(self, kind: str, message: str, *, event_id: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.event_id = event_id  # an EVENT's claimed id when one was readable (for OK false)


class Prefix(str, Enum):
    """NIP-01 machine-readable prefixes of ``OK``/``CLOSED`` reasons (plus strfry's ``replaced``)."""

    DUPLICATE = "duplicate"
    POW = "pow"
    BLOCKED = "blocked"
    RATE_LIMITED = "rate-limited"
    INVALID = "invalid"
    RESTRICTED = "restricted"
    MUTE = "mute"
    ERROR = "error"
    AUTH_REQUIRED = "auth-required"
    UNSUPPORTED = "unsupported"
    REPLACED = "replaced"  # not in NIP-01: strfry's and our embedded relay's "I hold a newer version"

    @classmethod
    def of(cls, reason: str) -> Prefix | None:
        """The prefix ``reason`` starts with (``"blocked: no"`` → BLOCKED), or None."""
        head, sep, _ = reason.partition(":")
        if not sep:
            return None
        try:
            return cls(head.strip().lower())
        except ValueError:
            return None

    def reason(self, text: str) -> str:
        """``Prefix.INVALID.reason("bad signature")`` → ``"invalid: bad signature"``."""
        return f"{self.value}: {text}"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class _Message:
    __slots__ = ()

    def to_list(self) -> list[Any]:
        raise NotImplementedError

    def to_json(self) -> str:
        return _dumps(self.to_list())


# --- client → relay ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClientEvent(_Message):
    event: Mapping[str, Any]  # the wire object, as sent

    @classmethod
    def of(cls, ev: Event) -> ClientEvent:
        return cls(ev.to_dict())

    def to_list(self) -> list[Any]:
        return ["EVENT", dict(self.event)]


@dataclass(frozen=True, slots=True)
class ClientReq(_Message):
    sub_id: str
    filters: tuple[Mapping[str, Any], ...]  # as sent; the receiver validates them

    def to_list(self) -> list[Any]:
        return ["REQ", self.sub_id, *(dict(f) for f in self.filters)]


@dataclass(frozen=True, slots=True)
class ClientClose(_Message):
    sub_id: str

    def to_list(self) -> list[Any]:
        return ["CLOSE", self.sub_id]


@dataclass(frozen=True, slots=True)
class ClientAuth(_Message):
    event: Mapping[str, Any]  # a signed kind-22242 event, as sent

    @classmethod
    def of(cls, ev: Event) -> ClientAuth:
        return cls(ev.to_dict())

    def to_list(self) -> list[Any]:
        return ["AUTH", dict(self.event)]


ClientMessage = ClientEvent | ClientReq | ClientClose | ClientAuth


# --- relay → client ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RelayEvent(_Message):
    sub_id: str
    event: Mapping[str, Any]  # the wire object, not yet checked as an event

    @classmethod
    def of(cls, sub_id: str, ev: Event) -> RelayEvent:
        return cls(sub_id, ev.to_dict())

    def to_list(self) -> list[Any]:
        return ["EVENT", self.sub_id, dict(self.event)]


@dataclass(frozen=True, slots=True)
class RelayOk(_Message):
    event_id: str
    accepted: bool
    reason: str = ""

    @property
    def prefix(self) -> Prefix | None:
        return Prefix.of(self.reason)

    def to_list(self) -> list[Any]:
        return ["OK", self.event_id, self.accepted, self.reason]


@dataclass(frozen=True, slots=True)
class RelayEose(_Message):
    sub_id: str

    def to_list(self) -> list[Any]:
        return ["EOSE", self.sub_id]


@dataclass(frozen=True, slots=True)
class RelayClosed(_Message):
    sub_id: str
    reason: str = ""

    @property
    def prefix(self) -> Prefix | None:
        return Prefix.of(self.reason)

    def to_list(self) -> list[Any]:
        return ["CLOSED", self.sub_id, self.reason]


@dataclass(frozen=True, slots=True)
class RelayNotice(_Message):
    text: str

    def to_list(self) -> list[Any]:
        return ["NOTICE", self.text]


@dataclass(frozen=True, slots=True)
class RelayAuth(_Message):
    challenge: str

    def to_list(self) -> list[Any]:
        return ["AUTH", self.challenge]


RelayMessage = RelayEvent | RelayOk | RelayEose | RelayClosed | RelayNotice | RelayAuth


# --- parsing ----------------------------------------------------------------------------------
def _load(data: str | bytes) -> list[Any]:
    try:
        msg = json.loads(data)
    except (ValueError, RecursionError):
        raise MessageError(BAD_JSON, "not JSON") from None
    if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
        raise MessageError(BAD_MESSAGE, "not a JSON array starting with a message type")
    return msg


def _text(msg: Sequence[Any], i: int, *, required: bool = True, nonempty: bool = False) -> str:
    if len(msg) <= i:
        if required:
            raise MessageError(BAD_MESSAGE, f"{msg[0]}: element {i} is missing")
        return ""
    value = msg[i]
    if not isinstance(value, str) or (nonempty and not value):
        if required:
            raise MessageError(BAD_MESSAGE, f"{msg[0]}: element {i} must be a string")
        return ""
    return value


def _event_object(msg: Sequence[Any], i: int) -> Mapping[str, Any]:
    value = msg[i]
    if not isinstance(value, dict):
        raise MessageError(BAD_EVENT, f"{msg[0]}: the event must be a JSON object")
    return value


def parse_relay_message(data: str | bytes) -> RelayMessage:
    """A frame a relay sent. Raises :class:`MessageError` (``kind`` says why)."""
    msg = _load(data)
    kind = msg[0]
    if kind == "EVENT":
        if len(msg) != 3:
            raise MessageError(BAD_MESSAGE, "EVENT: expected a subscription id and an event")
        return RelayEvent(_text(msg, 1), _event_object(msg, 2))
    if kind == "OK":
        if len(msg) < 3 or not isinstance(msg[2], bool):
            raise MessageError(BAD_MESSAGE, "OK: expected an event id, true/false and a reason")
        return RelayOk(_text(msg, 1), msg[2], _text(msg, 3, required=False))
    if kind == "EOSE":
        return RelayEose(_text(msg, 1))
    if kind == "CLOSED":
        return RelayClosed(_text(msg, 1), _text(msg, 2, required=False))
    if kind == "NOTICE":
        return RelayNotice(_text(msg, 1, required=False))
    if kind == "AUTH":
        return RelayAuth(_text(msg, 1, nonempty=True))
    raise MessageError(UNKNOWN_MESSAGE, "unknown message type")


def parse_client_message(data: str | bytes) -> ClientMessage:
    """A frame a client sent. Raises :class:`MessageError` (``kind`` says why; for an EVENT or
    AUTH whose event is malformed, ``event_id`` holds its claimed id when it has one)."""
    msg = _load(data)
    kind = msg[0]
    if kind in ("EVENT", "AUTH"):
        if len(msg) != 2 or not isinstance(msg[1], dict):
            claimed = msg[1].get("id") if len(msg) > 1 and isinstance(msg[1], dict) else None
            raise MessageError(BAD_MESSAGE, f"{kind}: expected one event object",
                               event_id=claimed if isinstance(claimed, str) else None)
        return ClientEvent(msg[1]) if kind == "EVENT" else ClientAuth(msg[1])
    if kind == "REQ":
        sub_id = _text(msg, 1)
        filters = msg[2:]
        if not filters or not all(isinstance(f, dict) for f in filters):
            raise MessageError(BAD_MESSAGE, "REQ: expected a subscription id and filter objects")
        return ClientReq(sub_id, tuple(filters))
    if kind == "CLOSE":
        if len(msg) != 2:
            raise MessageError(BAD_MESSAGE, "CLOSE: expected a subscription id")
        return ClientClose(_text(msg, 1))
    raise MessageError(UNKNOWN_MESSAGE, "unknown message type")


# ``["EVENT","<sub id>",`` — a sub id with no escapes reads the same raw as parsed. Anything else
# (escapes, odd spacing, another message type) gives None and the caller parses the frame fully.
_EVENT_HEAD = re.compile(rb'\A\s*\[\s*"EVENT"\s*,\s*"([^"\\\x00-\x1f]{1,64})"\s*,')


def sniff_subscription_id(data: bytes) -> str | None:
    """The subscription id of a relay ``EVENT`` frame, read without parsing the JSON, or None."""
    m = _EVENT_HEAD.match(data[:200])
    if m is None:
        return None
    try:
        return m.group(1).decode("utf-8")
    except UnicodeDecodeError:
        return None


_EVENT_ID = re.compile(rb'"id"\s*:\s*"([0-9a-f]{64})"')


def sniff_event_id(data: bytes) -> str | None:
    """The first ``"id":"<64 hex>"`` in a frame, read without parsing it (e.g. an oversized EVENT a
    relay will not parse but must answer with ``OK false``). A hint for addressing an answer only:
    a crafted frame can put another id first, so never trust it for anything else."""
    m = _EVENT_ID.search(data)
    return m.group(1).decode("ascii") if m else None
