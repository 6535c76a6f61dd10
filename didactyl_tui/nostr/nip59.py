"""NIP-59 gift wrap: rumor (unsigned event) → seal (kind 13) → gift wrap (kind 1059).

Pure and deterministic: every timestamp, the one-time wrapper key and the NIP-44 nonces are parameters.
:func:`wrap` is the explicit form; :func:`wrap_with_rng` draws them from an injected ``random.Random``
(``random.SystemRandom()`` — the default — in production, a seeded ``random.Random`` in tests).

:func:`unwrap_with`, :func:`seal_with` and :func:`wrap_with` are the same with the agent's key behind a
:class:`~.signer.Signer` (a NIP-46 remote signer: only the signer's calls are async).

:func:`unwrap` is :func:`unwrap_seal` (the outer layer: who sealed it, proven) then :func:`open_seal` (the rumor),
so a reader can judge a wrap by its sender before paying for the rest.

:func:`unwrap` checks every layer and raises an :class:`UnwrapError` subclass naming what failed:
the wrap's kind, id and signature and that it is addressed to us; that both layers decrypt; the seal's
kind, id and signature; the rumor's shape and id; and that the seal's signer wrote the rumor (otherwise
anyone could seal a rumor claiming another author).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import Nip44Error, NostrError
from . import nip44
from .event import Event, Tags, compute_id, sign_event
from .keys import SecretKey, is_hex_pubkey
from .kinds import GIFT_WRAP, SEAL
from .signer import Signer

# NIP-59: "All other timestamps SHOULD be tweaked": up to two days in the past, never in the future.
MAX_BACKDATE_SECONDS = 2 * 24 * 60 * 60
_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


class UnwrapError(NostrError):
    """A gift wrap could not be opened; the message says which layer and why."""

    title = "Gift wrap"


class WrapRejected(UnwrapError):
    """The outer kind 1059 event is wrong: kind, id, signature, or not addressed to this key."""


class DecryptFailed(UnwrapError):
    """A layer did not decrypt with our key (not for us, or altered)."""


class SealRejected(UnwrapError):
    """The kind 13 seal is malformed, of the wrong kind, or badly signed."""


class RumorRejected(UnwrapError):
    """The rumor inside the seal is malformed or its id does not match its content."""


class SenderMismatch(UnwrapError):
    """The seal was signed by someone other than the rumor's author (impersonation attempt)."""


@dataclass(frozen=True, slots=True)
class Rumor:
    """An unsigned event: the real message. Its id is the usual NIP-01 hash (used for dedupe)."""

    id: str
    pubkey: str
    created_at: int
    kind: int
    tags: Tags
    content: str

    @classmethod
    def build(cls, pubkey: str, *, kind: int, content: str, created_at: int,
              tags: Iterable[Sequence[str]] = ()) -> Rumor:
        if not is_hex_pubkey(pubkey):
            raise NostrError("a rumor's pubkey must be 64 hex characters")
        pubkey = pubkey.lower()
        tag_tuple: Tags = tuple(tuple(str(x) for x in t) for t in tags)
        return cls(compute_id(pubkey, created_at, kind, tag_tuple, content), pubkey, created_at, kind,
                   tag_tuple, content)

    @classmethod
    def from_dict(cls, data: Any) -> Rumor:
        """Check the shape (as an event without ``sig``) and that the id matches the content."""
        if not isinstance(data, Mapping):
            raise RumorRejected("the rumor is not a JSON object")
        stand_in = {**data, "sig": "0" * 128}  # reuse the event shape checks; a rumor's sig is ignored
        try:
            ev = Event.from_dict(stand_in)
        except NostrError as exc:
            raise RumorRejected(f"bad rumor: {exc.message}") from None
        rumor = cls(ev.id, ev.pubkey, ev.created_at, ev.kind, ev.tags, ev.content)
        if ev.computed_id() != ev.id:
            raise RumorRejected("the rumor's id does not match its content")
        return rumor

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "pubkey": self.pubkey, "created_at": self.created_at, "kind": self.kind,
                "tags": [list(t) for t in self.tags], "content": self.content}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    def tag_values(self, name: str) -> list[str]:
        return [t[1] for t in self.tags if len(t) >= 2 and t[0] == name]

    def first_tag(self, name: str) -> str | None:
        values = self.tag_values(name)
        return values[0] if values else None


@dataclass(frozen=True, slots=True)
class Unwrapped:
    """Every layer of an opened gift wrap. ``sender`` is the seal's (verified) signer."""

    rumor: Rumor
    seal: Event
    wrap: Event

    @property
    def sender(self) -> str:
        return self.seal.pubkey


# --- building ------------------------------------------------------------------------------


def seal(rumor: Rumor, sender: SecretKey, recipient_pubkey: str, *, created_at: int,
         nonce: bytes | None = None) -> Event:
    """Encrypt the rumor to ``recipient_pubkey`` with the sender's key and sign it as a kind 13."""
    if rumor.pubkey != sender.public_key_hex:
        raise NostrError("a seal must be signed by the rumor's author")
    _check_recipient(recipient_pubkey)
    key = nip44.get_conversation_key(sender.secret_hex(), recipient_pubkey.lower())
    return sign_event(sender, kind=SEAL, content=nip44.encrypt(rumor.to_json(), key, nonce), created_at=created_at)


def gift_wrap(sealed: Event, recipient_pubkey: str, *, wrapper_key: SecretKey, created_at: int,
              nonce: bytes | None = None, extra_tags: Iterable[Sequence[str]] = ()) -> Event:
    """Encrypt the seal with a one-time ``wrapper_key`` and address it with a ``p`` tag."""
    if sealed.kind != SEAL:
        raise NostrError(f"only a kind {SEAL} seal is gift-wrapped here, not kind {sealed.kind}")
    _check_recipient(recipient_pubkey)
    recipient = recipient_pubkey.lower()
    key = nip44.get_conversation_key(wrapper_key.secret_hex(), recipient)
    return sign_event(wrapper_key, kind=GIFT_WRAP, content=nip44.encrypt(sealed.to_json(), key, nonce),
                      created_at=created_at, tags=(("p", recipient), *extra_tags))


def wrap(rumor: Rumor, sender: SecretKey, recipient_pubkey: str, *, wrapper_key: SecretKey,
         seal_created_at: int, wrap_created_at: int, seal_nonce: bytes | None = None,
         wrap_nonce: bytes | None = None) -> Event:
    """Seal then gift-wrap ``rumor`` for one recipient, every random input given explicitly."""
    sealed = seal(rumor, sender, recipient_pubkey, created_at=seal_created_at, nonce=seal_nonce)
    return gift_wrap(sealed, recipient_pubkey, wrapper_key=wrapper_key, created_at=wrap_created_at,
                     nonce=wrap_nonce)


def backdated(now: int, rng: random.Random) -> int:
    """A timestamp up to two days before ``now`` (NIP-59's advice against timing analysis)."""
    return now - rng.randint(0, MAX_BACKDATE_SECONDS)


def wrapper_key_from(rng: random.Random) -> SecretKey:
    """A one-time key drawn from ``rng`` (retrying the ~2^-128 chance of an out-of-range value)."""
    while True:
        raw = rng.randbytes(32)
        if 0 < int.from_bytes(raw, "big") < _N:
            return SecretKey(raw)


def wrap_with_rng(rumor: Rumor, sender: SecretKey, recipient_pubkey: str, *, now: int,
                  rng: random.Random | None = None) -> Event:
    """:func:`wrap` with backdated timestamps, a fresh wrapper key and nonces drawn from ``rng``."""
    rng = rng if rng is not None else random.SystemRandom()
    return wrap(rumor, sender, recipient_pubkey, wrapper_key=wrapper_key_from(rng),
                seal_created_at=backdated(now, rng), wrap_created_at=backdated(now, rng),
                seal_nonce=rng.randbytes(32), wrap_nonce=rng.randbytes(32))


# --- opening -------------------------------------------------------------------------------


def unwrap(wrapped: Event, recipient: SecretKey) -> Unwrapped:
    """Open a kind 1059 addressed to ``recipient``; every check of the module doc, in order."""
    return open_seal(wrapped, unwrap_seal(wrapped, recipient), recipient)


async def unwrap_with(wrapped: Event, signer: Signer) -> Unwrapped:
    """:func:`unwrap` with the recipient's key behind a :class:`~.signer.Signer` (two decrypts, one per layer:
    with a remote signer, two round trips). The same checks, in the same order."""
    return await open_seal_with(wrapped, await unwrap_seal_with(wrapped, signer), signer)


def unwrap_seal(wrapped: Event, recipient: SecretKey) -> Event:
    """The outer layer of :func:`unwrap` alone: the wrap checked and its seal decrypted and checked (kind, id,
    signature). The seal's ``pubkey`` is then the proven sender, known for one decrypt with the one-time key: enough
    to judge a wrap before opening the rest with :func:`open_seal`."""
    _check_wrap(wrapped, recipient.public_key_hex)
    return _seal_from(_decrypt_json(wrapped, recipient, "gift wrap", SealRejected))


async def unwrap_seal_with(wrapped: Event, signer: Signer) -> Event:
    """:func:`unwrap_seal` with the recipient's key behind a :class:`~.signer.Signer` (one decrypt)."""
    _check_wrap(wrapped, signer.public_key)
    return _seal_from(await _decrypt_json_with(wrapped, signer, "gift wrap", SealRejected))


def open_seal(wrapped: Event, sealed: Event, recipient: SecretKey) -> Unwrapped:
    """The inner layer of :func:`unwrap`: ``sealed``, what :func:`unwrap_seal` gave for ``wrapped``, decrypted, its
    rumor checked and its author matched against the seal's signer."""
    return _opened(wrapped, sealed, _decrypt_json(sealed, recipient, "seal", RumorRejected))


async def open_seal_with(wrapped: Event, sealed: Event, signer: Signer) -> Unwrapped:
    """:func:`open_seal` with the recipient's key behind a :class:`~.signer.Signer` (one decrypt)."""
    return _opened(wrapped, sealed, await _decrypt_json_with(sealed, signer, "seal", RumorRejected))


async def seal_with(rumor: Rumor, signer: Signer, recipient_pubkey: str, *, created_at: int) -> Event:
    """:func:`seal` by the key behind ``signer`` (the nonce is the signer's)."""
    if rumor.pubkey != signer.public_key:
        raise NostrError("a seal must be signed by the rumor's author")
    _check_recipient(recipient_pubkey)
    content = await signer.nip44_encrypt(recipient_pubkey.lower(), rumor.to_json())
    return await signer.sign_event(kind=SEAL, content=content, created_at=created_at, tags=())


async def wrap_with(rumor: Rumor, signer: Signer, recipient_pubkey: str, *, now: int,
                    rng: random.Random | None = None) -> Event:
    """:func:`wrap_with_rng` with the sender's key behind ``signer``: the seal is the signer's (one encrypt, one
    sign), the gift wrap is made here with a one-time key, as NIP-59 has it."""
    rng = rng if rng is not None else random.SystemRandom()
    sealed = await seal_with(rumor, signer, recipient_pubkey, created_at=backdated(now, rng))
    return gift_wrap(sealed, recipient_pubkey, wrapper_key=wrapper_key_from(rng), created_at=backdated(now, rng),
                     nonce=rng.randbytes(32))


def _check_wrap(wrapped: Event, me: str) -> None:
    if wrapped.kind != GIFT_WRAP:
        raise WrapRejected(f"not a gift wrap: kind {wrapped.kind} (expected {GIFT_WRAP})")
    _verified(wrapped, WrapRejected, "gift wrap")
    if me not in wrapped.tag_values("p"):
        raise WrapRejected("the gift wrap is not addressed to this key (no matching p tag)")


def _seal_from(data: Any) -> Event:
    try:
        sealed = Event.from_dict(data)
    except NostrError as exc:
        raise SealRejected(f"bad seal: {exc.message}") from None
    if sealed.kind != SEAL:
        raise SealRejected(f"the wrapped event is kind {sealed.kind}, not a kind {SEAL} seal")
    _verified(sealed, SealRejected, "seal")
    return sealed


def _opened(wrapped: Event, sealed: Event, rumor_data: Any) -> Unwrapped:
    rumor = Rumor.from_dict(rumor_data)
    if rumor.pubkey != sealed.pubkey:
        raise SenderMismatch(
            f"the seal was signed by {sealed.pubkey[:12]}… but the rumor claims author {rumor.pubkey[:12]}…")
    return Unwrapped(rumor, sealed, wrapped)


def _check_recipient(pubkey: str) -> None:
    if not isinstance(pubkey, str) or not is_hex_pubkey(pubkey):
        raise NostrError("the recipient must be a 64-hex-character public key")


def _verified(ev: Event, error: type[UnwrapError], layer: str) -> None:
    try:
        ev.check()
    except NostrError as exc:
        raise error(f"{layer} {ev.id[:12]}…: {exc.message}") from None


def _decrypt_json(outer: Event, recipient: SecretKey, layer: str, inner_error: type[UnwrapError]) -> Any:
    try:
        key = nip44.get_conversation_key(recipient.secret_hex(), outer.pubkey)
        text = nip44.decrypt(outer.content, key)
    except Nip44Error as exc:
        raise DecryptFailed(f"the {layer} does not decrypt with this key: {exc.message}") from None
    return _json_event(text, layer, inner_error)


async def _decrypt_json_with(outer: Event, signer: Signer, layer: str, inner_error: type[UnwrapError]) -> Any:
    try:
        text = await signer.nip44_decrypt(outer.pubkey, outer.content)
    except Nip44Error as exc:
        raise DecryptFailed(f"the {layer} does not decrypt with this key: {exc.message}") from None
    return _json_event(text, layer, inner_error)


def _json_event(text: str, layer: str, inner_error: type[UnwrapError]) -> Any:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise inner_error(f"the {layer} holds no JSON event") from None
    if not isinstance(data, dict):
        raise inner_error(f"the {layer} holds no JSON event")
    return data
