"""The one place the direct-message code uses the agent's secret key: opening gift wraps, sealing and wrapping
replies, signing the agent's DM relay list, and signing in (NIP-42) on relays the agent does not otherwise use.

Everything here is async: :class:`LocalDmSigner` does the work with the key on a worker thread (the fast path);
:class:`SignerDmSigner` does it through any :class:`~didactyl_tui.nostr.signer.Signer`, such as a NIP-46 remote
signer (every seal and unseal a round trip; the gift wrap's one-time key stays here, as NIP-59 has it).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable
from typing import Protocol

from ...nostr.event import Event
from ...nostr.keys import SecretKey
from ...nostr.nip17 import (
    DirectMessage,
    build_dm_relay_list,
    dm_relay_list_with,
    open_message,
    open_message_with,
    wrap_message,
    wrap_message_with,
)
from ...nostr.nip59 import Rumor, wrap_with, wrap_with_rng
from ...nostr.signer import Signer


class DmSigner(Protocol):
    @property
    def public_key_hex(self) -> str: ...

    async def open(self, wrap: Event) -> DirectMessage:
        """Unwrap and check a gift wrap addressed to the agent (raises an ``UnwrapError`` naming the layer)."""
        ...

    async def wrap(self, rumor: Rumor, *, now: int) -> dict[str, Event]:
        """One gift wrap per ``p`` tag of ``rumor`` plus the agent's own copy, keyed by recipient."""
        ...

    async def wrap_to(self, rumor: Rumor, recipient: str, *, now: int) -> Event:
        """One gift wrap of ``rumor`` (any kind) for ``recipient`` only: no copy to anyone else."""
        ...

    async def dm_relay_list(self, relays: Iterable[str], *, created_at: int) -> Event:
        """The agent's signed kind 10050."""
        ...

    @property
    def relay_auth_key(self) -> SecretKey | Signer | None:
        """For NIP-42 on a relay reached only to deliver a reply (None: do not sign in)."""
        ...


class LocalDmSigner:
    """The agent's key, held in this process."""

    def __init__(self, key: SecretKey, *, rng: random.Random | None = None) -> None:
        self._key = key
        self._rng = rng  # None: a fresh SystemRandom per wrap (tests pass a seeded one)

    @property
    def public_key_hex(self) -> str:
        return self._key.public_key_hex

    async def open(self, wrap: Event) -> DirectMessage:
        return await asyncio.to_thread(open_message, wrap, self._key)

    async def wrap(self, rumor: Rumor, *, now: int) -> dict[str, Event]:
        return await asyncio.to_thread(wrap_message, rumor, self._key, now=now, rng=self._rng, copy_to_self=True)

    async def wrap_to(self, rumor: Rumor, recipient: str, *, now: int) -> Event:
        return await asyncio.to_thread(wrap_with_rng, rumor, self._key, recipient, now=now, rng=self._rng)

    async def dm_relay_list(self, relays: Iterable[str], *, created_at: int) -> Event:
        return build_dm_relay_list(self._key, list(relays), created_at=created_at)

    @property
    def relay_auth_key(self) -> SecretKey | None:
        return self._key


class SignerDmSigner:
    """The agent's key behind a :class:`~didactyl_tui.nostr.signer.Signer` (NIP-46: the key is not here)."""

    def __init__(self, signer: Signer, *, rng: random.Random | None = None) -> None:
        self._signer = signer
        self._rng = rng

    @property
    def public_key_hex(self) -> str:
        return self._signer.public_key

    async def open(self, wrap: Event) -> DirectMessage:
        return await open_message_with(wrap, self._signer)

    async def wrap(self, rumor: Rumor, *, now: int) -> dict[str, Event]:
        return await wrap_message_with(rumor, self._signer, now=now, rng=self._rng, copy_to_self=True)

    async def wrap_to(self, rumor: Rumor, recipient: str, *, now: int) -> Event:
        return await wrap_with(rumor, self._signer, recipient, now=now, rng=self._rng)

    async def dm_relay_list(self, relays: Iterable[str], *, created_at: int) -> Event:
        return await dm_relay_list_with(self._signer, relays, created_at=created_at)

    @property
    def relay_auth_key(self) -> SecretKey | Signer | None:
        return self._signer  # NIP-42 through the signer too (one more round trip, only when a relay asks)
