"""NIP-46 (Nostr Connect, a remote signer), the pure part: messages, kind 24133 events, bounds. The URIs and
``connect``'s params are :mod:`.nip46_uri`'s; what a client keeps between runs, :mod:`.nip46_session`'s.

As the NIP now stands: requests and replies travel as kind 24133 events whose content is NIP-44 encrypted
between the client's key and the signer's key (NIP-04 transport is gone); ``get_public_key`` follows
``connect`` because the user's key may differ from the signer's; ``switch_relays``, ``logout`` and
``auth_url`` challenges exist. No I/O, no clock, no randomness: callers pass ``created_at``, the nonce and the
request id (the edge is :mod:`.remote_signer`).

The size bound: a ``nip44_encrypt`` request carries the plaintext and its reply carries the NIP-44 payload of
that plaintext, both inside one NIP-44 message of at most 65,535 bytes (``nip44_decrypt`` the other way round).
The payload of ``n`` bytes is base64 of ``67 + padded(n)`` bytes, and padding grows in steps of 8,192 above
32,768, so :data:`MAX_PLAINTEXT_BYTES` (computed below, 40,960) is the largest plaintext that can travel;
:func:`check_plaintext` also counts what JSON escaping adds (newlines, quotes, control characters).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..errors import NostrError, SignerKeyMismatchError
from . import nip44
from .event import Event, sign_event
from .keys import SecretKey
from .kinds import NOSTR_CONNECT, SIGNER_KEY_CHECK
from .nip19 import short_npub

KIND = NOSTR_CONNECT


class Method(StrEnum):
    """The methods a client may call (NIP-04 methods exist in the NIP; this client never calls them)."""

    CONNECT = "connect"
    SIGN_EVENT = "sign_event"
    PING = "ping"
    GET_PUBLIC_KEY = "get_public_key"
    NIP44_ENCRYPT = "nip44_encrypt"
    NIP44_DECRYPT = "nip44_decrypt"
    SWITCH_RELAYS = "switch_relays"
    LOGOUT = "logout"


ACK = "ack"
PONG = "pong"
AUTH_URL = "auth_url"  # a reply's result when the signer wants the person to authenticate at the URL in `error`

# --- bounds -------------------------------------------------------------------------------------------------
MAX_MESSAGE_BYTES = nip44.MAX_PLAINTEXT_BYTES  # one request or reply, as JSON, in UTF-8
MAX_ID_CHARS = 64  # a request id (ours are 16 hex characters; applesauce uses 8 to 21)
REQUEST_ID_CHARS = 16
# What a signer's reply may add around the text it carries: {"id":"<up to 64>","result":"…","error":""}.
REPLY_ENVELOPE_BYTES = 128

_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # escapes what JavaScript's JSON.stringify does


# --- messages -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Request:
    """``{"id", "method", "params"}``: params are positional strings."""

    id: str
    method: str
    params: tuple[str, ...] = ()

    def to_json(self) -> str:
        return _JSON.encode({"id": self.id, "method": self.method, "params": list(self.params)})


@dataclass(frozen=True, slots=True)
class Response:
    """``{"id", "result", "error"}``. An ``error`` means the request failed, except with ``result`` =
    ``auth_url``: then ``error`` is the URL the person must open, and the real reply follows later."""

    id: str
    result: str | None
    error: str | None = None

    @property
    def is_auth_url(self) -> bool:
        return self.result == AUTH_URL and bool(self.error)

    @property
    def failed(self) -> bool:
        return bool(self.error) and not self.is_auth_url

    def to_json(self) -> str:
        data: dict[str, Any] = {"id": self.id, "result": self.result}
        if self.error is not None:
            data["error"] = self.error
        return _JSON.encode(data)


Message = Request | Response


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise NostrError(f"{what} is not valid JSON") from None
    if not isinstance(data, dict):
        raise NostrError(f"{what} must be a JSON object")
    return data


def parse_message(text: str) -> Message:
    """A decrypted request or reply; :class:`NostrError` saying what is wrong with it."""
    data = _json_object(text, "a NIP-46 message")
    mid = data.get("id")
    if not isinstance(mid, str) or not 1 <= len(mid) <= MAX_ID_CHARS:
        raise NostrError(f"a NIP-46 message needs an 'id' string of 1 to {MAX_ID_CHARS} characters")
    if "method" in data:
        method, params = data["method"], data.get("params", [])
        if not isinstance(method, str) or not method:
            raise NostrError("a NIP-46 request's 'method' must be a non-empty string")
        if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
            raise NostrError("a NIP-46 request's 'params' must be a list of strings")
        return Request(mid, method, tuple(params))
    result, error = data.get("result"), data.get("error")
    if isinstance(result, list | dict):  # some signers send switch_relays' list as JSON, not as a string
        result = _JSON.encode(result)
    elif result is not None and not isinstance(result, str):
        raise NostrError("a NIP-46 reply's 'result' must be a string")
    if error is not None and not isinstance(error, str):
        error = _JSON.encode(error)
    return Response(mid, result, error)


# --- kind 24133 events --------------------------------------------------------------------------------------
def conversation_key(key: SecretKey, peer: str) -> bytes:
    """The NIP-44 key between our key and the other side's (compute once per peer, pass it in)."""
    return nip44.get_conversation_key(key.secret_hex(), peer)


def build_event(
    sender: SecretKey,
    recipient: str,
    message: Message,
    *,
    created_at: int,
    conversation_key: bytes | None = None,
    nonce: bytes | None = None,
) -> Event:
    """The kind 24133 event carrying ``message`` from ``sender`` to ``recipient`` (NIP-44, ``p``-tagged).

    Raises :class:`NostrError` naming the limit when the message is over 65,535 bytes.
    """
    text = message.to_json()
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_MESSAGE_BYTES:
        raise NostrError(
            f"this {_what(message)} is {size:,} bytes as JSON: a NIP-46 message can be at most "
            f"{MAX_MESSAGE_BYTES:,} bytes (NIP-44)",
            "Remote signer",
        )
    ck = conversation_key if conversation_key is not None else nip44.get_conversation_key(sender.secret_hex(),
                                                                                          recipient)
    content = nip44.encrypt(text, ck, nonce)
    return sign_event(sender, kind=KIND, content=content, created_at=created_at, tags=[["p", recipient]])


def read_event(receiver: SecretKey, event: Event, *, conversation_key: bytes | None = None) -> Message:
    """The message a kind 24133 event addressed to ``receiver`` carries (the event's signature is the
    caller's to check: relay clients verify every event they deliver)."""
    if event.kind != KIND:
        raise NostrError(f"a NIP-46 message is kind {KIND}, not {event.kind}")
    if receiver.public_key_hex not in event.tag_values("p"):
        raise NostrError("this NIP-46 message is not addressed to us")
    ck = conversation_key if conversation_key is not None else nip44.get_conversation_key(receiver.secret_hex(),
                                                                                          event.pubkey)
    return parse_message(nip44.decrypt(event.content, ck))


def _what(message: Message) -> str:
    return f"{message.method} request" if isinstance(message, Request) else "reply"


# --- sign_event ---------------------------------------------------------------------------------------------
def event_template(*, kind: int, content: str, created_at: int, tags: Sequence[Sequence[str]]) -> str:
    """The ``sign_event`` parameter: the unsigned event as JSON."""
    return _JSON.encode({"kind": kind, "content": content, "tags": [list(t) for t in tags],
                         "created_at": created_at})


def read_template(text: str) -> dict[str, Any]:
    """A ``sign_event`` parameter read back (for a signer): kind, content, tags, created_at, checked."""
    data = _json_object(text, "the event to sign")
    kind, content, tags, created_at = (data.get(k) for k in ("kind", "content", "tags", "created_at"))
    if isinstance(kind, bool) or not isinstance(kind, int) or not 0 <= kind <= 65535:
        raise NostrError("the event to sign needs a kind in 0..65535")
    if not isinstance(content, str):
        raise NostrError("the event to sign needs a string content")
    if not isinstance(tags, list) or not all(isinstance(t, list) and all(isinstance(x, str) for x in t)
                                             for t in tags):
        raise NostrError("the event to sign needs tags as a list of lists of strings")
    if isinstance(created_at, bool) or not isinstance(created_at, int) or created_at < 0:
        raise NostrError("the event to sign needs a non-negative integer created_at")
    return {"kind": kind, "content": content, "tags": tags, "created_at": created_at}


def check_signed_event(result: str | None, *, pubkey: str, kind: int, content: str, created_at: int,
                       tags: Sequence[Sequence[str]]) -> Event:
    """The signer's ``sign_event`` result, checked: a valid signature by ``pubkey`` over exactly what we asked."""
    if not result:
        raise NostrError("the remote signer answered sign_event with nothing", "Remote signer")
    try:
        event = Event.from_json(result)
    except NostrError as exc:
        raise NostrError(f"the remote signer's signed event is malformed: {exc}", "Remote signer") from None
    asked = (kind, content, created_at, tuple(tuple(str(x) for x in t) for t in tags))
    if (event.kind, event.content, event.created_at, event.tags) != asked:
        raise NostrError("the remote signer signed something other than the event we asked for", "Remote signer")
    try:
        event.check()
    except NostrError as exc:
        raise NostrError(f"the remote signer's signed event does not verify ({exc})", "Remote signer") from None
    if event.pubkey != pubkey:  # a valid signature, by another key
        raise SignerKeyMismatchError(f"the remote signer signed with the key {short_npub(event.pubkey)}, not with "
                                     f"{short_npub(pubkey)} (the key it named)", "Remote signer")
    return event


KEY_CHECK_TEXT = "didactyl checks that this signer signs with the key it named. This event is never published."


def key_check_event(*, created_at: int, nonce: str) -> dict[str, Any]:
    """What a signer is asked to sign to prove it holds the key it named: kind :data:`~.kinds.SIGNER_KEY_CHECK`
    (ephemeral, no NIP's meaning, never published), a sentence saying so and ``nonce`` (fresh for each check: a
    signature made before, by the real holder of that key, cannot answer it)."""
    return {"kind": SIGNER_KEY_CHECK, "content": f"{KEY_CHECK_TEXT} ({nonce})", "created_at": created_at, "tags": []}


# --- the size bound -----------------------------------------------------------------------------------------
def payload_chars(plaintext_bytes: int) -> int:
    """Characters of the base64 NIP-44 payload of a plaintext of this many UTF-8 bytes."""
    raw = 1 + 32 + 2 + nip44.calc_padded_len(plaintext_bytes) + 32  # version, nonce, length, padded text, MAC
    return 4 * -(-raw // 3)


def _request_envelope(method: Method) -> int:
    """Bytes our request adds around its last parameter (the text), with a 64-hex peer key."""
    probe = Request("0" * REQUEST_ID_CHARS, method, ("0" * 64, "")).to_json()
    return len(probe.encode("utf-8"))


def _largest_travelling_plaintext() -> int:
    """The largest plaintext (in bytes, nothing to escape) whose encrypt and decrypt both fit, both ways."""
    envelope = max(_request_envelope(Method.NIP44_ENCRYPT), _request_envelope(Method.NIP44_DECRYPT),
                   REPLY_ENVELOPE_BYTES)

    def fits(n: int) -> bool:
        return max(n, payload_chars(n)) + envelope <= MAX_MESSAGE_BYTES

    lo, hi = 1, nip44.MAX_PLAINTEXT_BYTES  # fits() only turns false as n grows: binary search
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


#: The largest plaintext, in UTF-8 bytes, a ``nip44_encrypt`` or ``nip44_decrypt`` request can carry
#: (NIP-44 inside NIP-44): 40,960.
MAX_PLAINTEXT_BYTES = _largest_travelling_plaintext()


def plaintext_fits(n_bytes: int) -> bool:
    """Whether a document of ``n_bytes`` UTF-8 bytes can travel to a remote signer (ignoring JSON escapes;
    :func:`check_plaintext` counts those)."""
    return 1 <= n_bytes <= MAX_PLAINTEXT_BYTES


def escaped_bytes(text: str) -> int:
    """UTF-8 bytes of ``text`` as a JSON string, without the quotes."""
    return len(_JSON.encode(text).encode("utf-8", "surrogatepass")) - 2


def check_plaintext(plaintext: str) -> None:
    """Raise :class:`NostrError`, naming the limit, when ``plaintext`` cannot travel to a remote signer."""
    try:
        n = len(plaintext.encode("utf-8"))
    except UnicodeEncodeError:
        raise NostrError("the text holds characters that cannot be encoded as UTF-8") from None
    if n == 0:
        raise NostrError("NIP-44 cannot encrypt an empty text")
    if n > MAX_PLAINTEXT_BYTES:
        raise NostrError(
            f"the text is {n:,} bytes: through a remote signer (NIP-46) it can be at most "
            f"{MAX_PLAINTEXT_BYTES:,} bytes",
            "Remote signer",
        )
    room = MAX_MESSAGE_BYTES - max(_request_envelope(Method.NIP44_ENCRYPT), REPLY_ENVELOPE_BYTES)
    escaped = escaped_bytes(plaintext)
    if escaped > room:
        raise NostrError(
            f"the text is {n:,} bytes but {escaped:,} once escaped as JSON (its line breaks, quotes and control "
            f"characters count twice or more): through a remote signer (NIP-46) that can be at most {room:,}",
            "Remote signer",
        )
