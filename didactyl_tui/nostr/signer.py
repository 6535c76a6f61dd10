"""The agent's key behind an interface: every signature and every NIP-44 encryption or decryption made with it
goes through a :class:`Signer`.

Shaped like rust-nostr's ``NostrSigner``: the public key, ``sign_event``, ``nip44_encrypt``, ``nip44_decrypt``, all
async, so a signer that lives elsewhere (NIP-46) fits behind the same calls. :class:`LocalSigner` holds the key in
this process; its work is CPU-bound and short, and runs on a worker thread so the loop the UI shares stays free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from . import nip44
from .event import Event, sign_event
from .keys import SecretKey


@runtime_checkable
class Signer(Protocol):
    """What the agent needs of its key. Every method may raise NostrError (a bad payload, a refused request)."""

    @property
    def public_key(self) -> str:
        """The key's x-only public key, hex."""
        ...

    async def sign_event(self, *, kind: int, content: str, created_at: int,
                         tags: Sequence[Sequence[str]]) -> Event: ...

    async def nip44_encrypt(self, peer: str, plaintext: str) -> str: ...

    async def nip44_decrypt(self, peer: str, payload: str) -> str: ...


class LocalSigner:
    """The key held in this process (the key file's)."""

    def __init__(self, key: SecretKey) -> None:
        self._key = key
        self._conversation_keys: dict[str, bytes] = {}

    @property
    def public_key(self) -> str:
        return self._key.public_key_hex

    def _conversation_key(self, peer: str) -> bytes:
        ck = self._conversation_keys.get(peer)
        if ck is None:
            if len(self._conversation_keys) >= 256:  # bounded: DM peers come and go
                self._conversation_keys.clear()
            ck = self._conversation_keys[peer] = nip44.get_conversation_key(self._key.secret_hex(), peer)
        return ck

    # Synchronous forms, for callers already on a worker thread.
    def sign_now(self, *, kind: int, content: str, created_at: int, tags: Sequence[Sequence[str]]) -> Event:
        return sign_event(self._key, kind=kind, content=content, created_at=created_at, tags=tags)

    def encrypt_now(self, peer: str, plaintext: str, nonce: bytes | None = None) -> str:
        return nip44.encrypt(plaintext, self._conversation_key(peer), nonce)

    def decrypt_now(self, peer: str, payload: str) -> str:
        return nip44.decrypt(payload, self._conversation_key(peer))

    async def sign_event(self, *, kind: int, content: str, created_at: int,
                         tags: Sequence[Sequence[str]]) -> Event:
        return await asyncio.to_thread(self.sign_now, kind=kind, content=content, created_at=created_at, tags=tags)

    async def nip44_encrypt(self, peer: str, plaintext: str) -> str:
        return await asyncio.to_thread(self.encrypt_now, peer, plaintext)

    async def nip44_decrypt(self, peer: str, payload: str) -> str:
        return await asyncio.to_thread(self.decrypt_now, peer, payload)
