"""NIP-17 private direct messages: kind 14 chat rumors in NIP-59 gift wraps, kind 10050 DM relay lists.

Pure: the clock (``created_at``/``now``) and randomness (``rng``) come from the caller. A message is
wrapped once per recipient and, by default, once more to the sender (its own copy, so another device
with the same key sees the whole conversation).

:func:`open_message` adds the NIP-17 checks on top of :func:`nip59.unwrap`: the rumor must be a kind 14
and must name the recipient (a ``p`` tag) unless the recipient wrote it (its own copy).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import NostrError
from .event import Event, sign_event
from .keys import SecretKey, is_hex_pubkey
from .kinds import DIRECT_MESSAGE, DM_RELAY_LIST, GIFT_WRAP
from .nip59 import Rumor, UnwrapError, Unwrapped, unwrap, unwrap_with, wrap_with, wrap_with_rng
from .signer import Signer

# The rumor is encrypted twice (seal, then wrap), each time growing by ~4/3 and padding: 32,000 bytes of
# text stays well inside NIP-44's 65,535-byte plaintext limit at the outer layer.
MAX_MESSAGE_BYTES = 32_000
MAX_RECIPIENTS = 16  # NIP-17: "group chats with more than 10 participants should find another scheme"
MAX_DM_RELAYS = 8  # NIP-17 asks for 1-3; more is read but cut here
_RELAY_URL = re.compile(r"^wss?://[^\s/?#]+[^\s]*$")


class NotADirectMessage(UnwrapError):
    """The gift wrap opened, but it holds something other than a NIP-17 chat message for us."""


@dataclass(frozen=True, slots=True)
class DirectMessage:
    """An opened, fully checked chat message. ``id`` is the rumor id: the key to dedupe on."""

    id: str
    sender: str
    text: str
    created_at: int
    recipients: tuple[str, ...]
    reply_to: str | None
    subject: str | None
    rumor: Rumor
    wrap_id: str

    @property
    def room(self) -> frozenset[str]:
        """NIP-17: the author plus the ``p`` tags define a chat room."""
        return frozenset((self.sender, *self.recipients))


def make_message(sender_pubkey: str, recipients: Iterable[str], text: str, *, created_at: int,
                 reply_to: str | None = None, subject: str | None = None,
                 extra_tags: Iterable[Sequence[str]] = ()) -> Rumor:
    """A kind 14 rumor from ``sender_pubkey`` to ``recipients`` (hex pubkeys); ``extra_tags`` after NIP-17's own
    (an application's, e.g. a pairing invitation: inside the seal, read by the recipient only)."""
    if not isinstance(text, str) or not text.strip():
        raise NostrError("a direct message needs some text")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_MESSAGE_BYTES:
        raise NostrError(f"a direct message is at most {MAX_MESSAGE_BYTES:,} UTF-8 bytes, this one is {size:,}")
    targets = _unique_pubkeys(recipients)
    if not targets:
        raise NostrError("a direct message needs at least one recipient")
    if len(targets) > MAX_RECIPIENTS:
        raise NostrError(f"a direct message has at most {MAX_RECIPIENTS} recipients, not {len(targets)}")
    tags: list[tuple[str, ...]] = [("p", pk) for pk in targets]
    if reply_to is not None:
        if not is_hex_pubkey(reply_to):  # an event id has the same shape as a pubkey
            raise NostrError("reply_to must be the 64-hex-character id of the message answered")
        tags.append(("e", reply_to.lower()))
    if subject:
        tags.append(("subject", subject))
    tags += [tuple(tag) for tag in extra_tags]
    return Rumor.build(sender_pubkey, kind=DIRECT_MESSAGE, content=text, created_at=created_at, tags=tags)


def wrap_message(rumor: Rumor, sender: SecretKey, *, now: int, rng: random.Random | None = None,
                 copy_to_self: bool = True) -> dict[str, Event]:
    """One gift wrap per recipient (plus the sender's own copy), keyed by the pubkey it is for."""
    targets = _targets(rumor, sender.public_key_hex, copy_to_self)
    return {pk: wrap_with_rng(rumor, sender, pk, now=now, rng=rng) for pk in targets}


async def wrap_message_with(rumor: Rumor, signer: Signer, *, now: int, rng: random.Random | None = None,
                            copy_to_self: bool = True) -> dict[str, Event]:
    """:func:`wrap_message` with the sender's key behind ``signer``: the seals are made concurrently (with a
    remote signer each is two round trips)."""
    targets = _targets(rumor, signer.public_key, copy_to_self)
    wraps = await asyncio.gather(*(wrap_with(rumor, signer, pk, now=now, rng=rng) for pk in targets))
    return dict(zip(targets, wraps, strict=True))


def open_message(wrapped: Event, recipient: SecretKey) -> DirectMessage:
    """Unwrap and check a NIP-17 message; raises an :class:`UnwrapError` subclass naming the problem."""
    return _direct_message(unwrap(wrapped, recipient), recipient.public_key_hex)


async def open_message_with(wrapped: Event, signer: Signer) -> DirectMessage:
    """:func:`open_message` with the recipient's key behind ``signer``."""
    return _direct_message(await unwrap_with(wrapped, signer), signer.public_key)


def _targets(rumor: Rumor, sender: str, copy_to_self: bool) -> list[str]:
    if rumor.kind != DIRECT_MESSAGE:
        raise NostrError(f"a NIP-17 message is a kind {DIRECT_MESSAGE} rumor, not kind {rumor.kind}")
    targets = _unique_pubkeys(rumor.tag_values("p"))
    if copy_to_self and sender not in targets:
        targets.append(sender)
    return targets


def _direct_message(opened: Unwrapped, me: str) -> DirectMessage:
    rumor = opened.rumor
    if rumor.kind != DIRECT_MESSAGE:
        raise NotADirectMessage(f"the gift wrap holds a kind {rumor.kind} rumor, not a kind {DIRECT_MESSAGE} message")
    try:
        recipients = tuple(_unique_pubkeys(rumor.tag_values("p")))
    except NostrError as exc:
        raise NotADirectMessage(f"bad recipient tag: {exc.message}") from None
    if me not in recipients and rumor.pubkey != me:
        raise NotADirectMessage("the message does not name this key among its recipients")
    reply_to = rumor.first_tag("e")
    return DirectMessage(
        id=rumor.id,
        sender=rumor.pubkey,
        text=rumor.content,
        created_at=rumor.created_at,
        recipients=recipients,
        reply_to=reply_to if reply_to and is_hex_pubkey(reply_to) else None,
        subject=rumor.first_tag("subject"),
        rumor=rumor,
        wrap_id=opened.wrap.id,
    )


def gift_wrap_filter(pubkey: str, *, since: int | None = None) -> dict[str, Any]:
    """The subscription for wraps addressed to ``pubkey``. ``since`` should allow for the 2-day backdating."""
    f: dict[str, Any] = {"kinds": [GIFT_WRAP], "#p": [pubkey]}
    if since is not None:
        f["since"] = max(0, since)
    return f


# --- kind 10050: DM relay list ---------------------------------------------------------------


def build_dm_relay_list(sk: SecretKey, relays: Iterable[str], *, created_at: int) -> Event:
    """The signed kind 10050 naming where this key receives gift wraps (``relay`` tags)."""
    return sign_event(sk, kind=DM_RELAY_LIST, content="", created_at=created_at, tags=dm_relay_tags(relays))


async def dm_relay_list_with(signer: Signer, relays: Iterable[str], *, created_at: int) -> Event:
    """:func:`build_dm_relay_list` signed by the key behind ``signer``."""
    return await signer.sign_event(kind=DM_RELAY_LIST, content="", created_at=created_at, tags=dm_relay_tags(relays))


def dm_relay_tags(relays: Iterable[str]) -> list[tuple[str, str]]:
    """A kind 10050's ``relay`` tags: checked URLs, in order, without repeats, at most :data:`MAX_DM_RELAYS`."""
    urls: list[str] = []
    for url in relays:
        if not isinstance(url, str) or not _RELAY_URL.match(url.strip()):
            raise NostrError(f"{url!r} is not a ws:// or wss:// relay URL")
        if url.strip() not in urls:
            urls.append(url.strip())
    if not urls:
        raise NostrError("a DM relay list needs at least one relay")
    if len(urls) > MAX_DM_RELAYS:
        raise NostrError(f"a DM relay list has at most {MAX_DM_RELAYS} relays, not {len(urls)}")
    return [("relay", u) for u in urls]


def dm_relays_of(event: Event | None) -> list[str]:
    """The valid, distinct relay URLs of a kind 10050 (at most :data:`MAX_DM_RELAYS`); [] for anything else."""
    if event is None or event.kind != DM_RELAY_LIST:
        return []
    urls: list[str] = []
    for url in event.tag_values("relay"):
        url = url.strip()
        if _RELAY_URL.match(url) and url not in urls:
            urls.append(url)
        if len(urls) == MAX_DM_RELAYS:
            break
    return urls


def delivery_relays(recipient_list: Event | None, fallback: Iterable[str]) -> list[str]:
    """Where to send a wrap: the recipient's kind 10050 relays, else ``fallback`` (the agent's own).

    NIP-17 says a missing list means "not ready to receive"; the agent still answers on its own relays,
    where the sender (who just wrote to it there) reads.
    """
    return dm_relays_of(recipient_list) or list(dict.fromkeys(fallback))


def dm_relay_list_filter(pubkeys: Iterable[str]) -> dict[str, Any]:
    return {"kinds": [DM_RELAY_LIST], "authors": _unique_pubkeys(pubkeys)}


def _unique_pubkeys(pubkeys: Iterable[str]) -> list[str]:
    out: list[str] = []
    for pk in pubkeys:
        if not isinstance(pk, str) or not is_hex_pubkey(pk):
            raise NostrError(f"{str(pk)[:70]!r} is not a 64-hex-character public key")
        if pk.lower() not in out:
            out.append(pk.lower())
    return out
