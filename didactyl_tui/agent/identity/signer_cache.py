"""What the agent's remote signer decrypted or encrypted for the agent itself, kept on this machine so the app can
open, and show the last known memory, soul and tasks, while the signer is away (and start without a round trip
per document when it is not).

:class:`SignerCache` is a small SQLite table (``signer-cache.sqlite3``, mode 0600, like the conversations and the
recall index: plaintext on this machine only), keyed by the SHA-256 of the NIP-44 payload; it keeps the newest
``max_entries`` texts and at most ``max_chars`` characters. :class:`CachedSigner` puts it in front of a signer for
payloads encrypted to the agent's own key (its documents); a DM's payloads (another peer) always go to the signer.
Only used with a remote signer: the key in hand decrypts in microseconds and leaves no plaintext on disk.
:class:`WatchedSigner` says when the signer stops answering and when it is back (the status bar shows it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ...errors import DidactylError, SignerKeyMismatchError, SignerUnreachableError
from ...nostr.event import Event
from ...nostr.signer import Signer
from ..private_files import connect_private, tighten_sqlite_files

CACHE_FILE_NAME = "signer-cache.sqlite3"
DEFAULT_MAX_ENTRIES = 512
DEFAULT_MAX_CHARS = 16 * 1024 * 1024
_T = TypeVar("_T")


class SignerCache:
    """Plaintexts by payload digest, bounded (entries and characters; the least recently used leave first)."""

    def __init__(self, path: Path | str, *, max_entries: int = DEFAULT_MAX_ENTRIES,
                 max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self._db = connect_private(path, check_same_thread=False)
        self._lock = threading.Lock()
        self.max_entries, self.max_chars = max_entries, max_chars
        with self._lock, self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS plaintext (digest TEXT PRIMARY KEY, text TEXT NOT NULL, "
                             "chars INTEGER NOT NULL, used REAL NOT NULL)")
        tighten_sqlite_files(path)

    @staticmethod
    def digest(payload: str) -> str:
        return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, payload: str) -> str | None:
        """The kept text, or None. A cache that cannot be read (locked by another didactyl on this data dir, a
        full disk) is a miss: the signer is asked, as without a cache."""
        key = self.digest(payload)
        try:
            with self._lock:
                row = self._db.execute("SELECT text FROM plaintext WHERE digest = ?", (key,)).fetchone()
                if row is not None:
                    with self._db:
                        self._db.execute("UPDATE plaintext SET used = ? WHERE digest = ?", (time.time(), key))
        except sqlite3.Error:
            return None
        return None if row is None else str(row[0])

    def put(self, payload: str, text: str) -> None:
        """Keep ``text``; a write that fails (locked, disk full) is skipped: the cache only saves round trips."""
        if len(text) > self.max_chars:
            return
        try:
            with self._lock, self._db:
                self._db.execute("INSERT OR REPLACE INTO plaintext VALUES (?, ?, ?, ?)",
                                 (self.digest(payload), text, len(text), time.time()))
                self._trim()
        except sqlite3.Error:
            return

    def _trim(self) -> None:
        count, chars = self._db.execute("SELECT COUNT(*), COALESCE(SUM(chars), 0) FROM plaintext").fetchone()
        while count > self.max_entries or chars > self.max_chars:
            row = self._db.execute("SELECT digest, chars FROM plaintext ORDER BY used LIMIT 1").fetchone()
            if row is None:
                return
            self._db.execute("DELETE FROM plaintext WHERE digest = ?", (row[0],))
            count, chars = count - 1, chars - row[1]

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM plaintext").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:
                pass


class CachedSigner:
    """``inner`` with :class:`SignerCache` in front of its NIP-44 to and from the agent's own key."""

    def __init__(self, inner: Signer, cache: SignerCache) -> None:
        self._inner, self._cache = inner, cache

    @property
    def public_key(self) -> str:
        return self._inner.public_key

    async def sign_event(self, *, kind: int, content: str, created_at: int,
                         tags: Sequence[Sequence[str]]) -> Event:
        return await self._inner.sign_event(kind=kind, content=content, created_at=created_at, tags=tags)

    async def nip44_encrypt(self, peer: str, plaintext: str) -> str:
        payload = await self._inner.nip44_encrypt(peer, plaintext)
        if peer == self.public_key:
            await asyncio.to_thread(self._cache.put, payload, plaintext)  # our own save reads back offline
        return payload

    async def nip44_decrypt(self, peer: str, payload: str) -> str:
        if peer != self.public_key:
            return await self._inner.nip44_decrypt(peer, payload)
        known = await asyncio.to_thread(self._cache.get, payload)
        if known is not None:
            return known
        text = await self._inner.nip44_decrypt(peer, payload)
        await asyncio.to_thread(self._cache.put, payload, text)
        return text


class WatchedSigner:
    """``inner`` telling ``on_change(reachable)`` when its signer stops answering (a request ends with
    :class:`SignerUnreachableError`) and when it answers again; :meth:`watch` pings it while it is away, so it is
    seen back without waiting for the person's next save. A signer that answers with another key than the agent's
    (:class:`SignerKeyMismatchError`) fails with ``wrong_key_help`` added: what the person can do about it."""

    def __init__(self, inner: Signer, ping: Callable[[], Awaitable[None]],
                 on_change: Callable[[bool], None], *, ping_interval_s: float = 10.0, wrong_key_help: str = "") -> None:
        self._inner, self._ping, self._on_change = inner, ping, on_change
        self.ping_interval_s = ping_interval_s
        self.wrong_key_help = wrong_key_help
        self.reachable = True
        self._away = asyncio.Event()

    def _seen(self, reachable: bool) -> None:
        if reachable != self.reachable:
            self.reachable = reachable
            (self._away.clear if reachable else self._away.set)()
            self._on_change(reachable)

    async def _call(self, call: Awaitable[_T]) -> _T:
        try:
            result = await call
        except SignerUnreachableError:
            self._seen(False)
            raise
        except SignerKeyMismatchError as exc:
            if not self.wrong_key_help:
                raise
            raise SignerKeyMismatchError(f"{exc.message}: {self.wrong_key_help}", exc.title) from None
        self._seen(True)
        return result

    @property
    def public_key(self) -> str:
        return self._inner.public_key

    async def sign_event(self, *, kind: int, content: str, created_at: int,
                         tags: Sequence[Sequence[str]]) -> Event:
        return await self._call(self._inner.sign_event(kind=kind, content=content, created_at=created_at, tags=tags))

    async def nip44_encrypt(self, peer: str, plaintext: str) -> str:
        return await self._call(self._inner.nip44_encrypt(peer, plaintext))

    async def nip44_decrypt(self, peer: str, payload: str) -> str:
        return await self._call(self._inner.nip44_decrypt(peer, payload))

    async def watch(self) -> None:
        """Run for the service's life: while the signer is away, ping it every ``ping_interval_s``."""
        while True:
            await self._away.wait()
            await asyncio.sleep(self.ping_interval_s)
            with contextlib.suppress(DidactylError):  # refused or still away: the state says which
                await self._call(self._ping())
