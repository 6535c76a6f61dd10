"""The agent's documents on Nostr, read and written the same way whatever they are.

One slot per document (:class:`~.keys.DocumentKey`). Newest wins (NIP-01, ties to the lowest id), wherever a version
comes from: the start-up fetch, our own save, the live subscription (another device, the CLI, any client with the
key), or this device's outbox and history. A version is *used* only when it reads: it decrypts with the agent's key
(through the :class:`~didactyl_tui.nostr.signer.Signer`) and the document's codec accepts it. A newer version that
does not read never replaces the one in use and is never taken as empty: it is warned about (the event named),
recorded, shown in the snapshot (``unreadable``), and our next save is dated after it (it supersedes it).

The store holds state and reads; it never signs or publishes. The one save path is :mod:`.saving` (check, date,
base, encrypt and sign, then :meth:`DocumentStore.adopt_own`, the outbox and relays, the history).

Every version the store sees goes to the version listeners (:class:`~.versions.VersionSeen`) before the change
listeners hear of it, so the sync can keep a history and judge concurrent edits (docs/sync.md).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ...nostr.event import Event
from ...nostr.replaceable import is_newer, newest_first
from ...nostr.signer import Signer
from ..background import BackgroundTasks
from .codec import DocumentCodec, DocumentError, UndecryptableError
from .events import VersionEvents
from .keys import DocumentKey
from .listeners import ChangeListener, StoreListeners, VersionListener, WarningListener
from .slots import Slot
from .versions import DocumentSnapshot, VersionSeen


class DocumentPool(Protocol):
    """What the store reads through (it never publishes): :class:`didactyl_tui.nostr.pool.RelayPool`."""

    async def query_by_relay(self, filters: list[dict[str, Any]], timeout: float = ...) -> dict[str, Any]: ...

    def subscribe(self, filters: list[dict[str, Any]], on_event: Callable[[str, Event], None]) -> Any: ...


class DocumentStore:
    def __init__(
        self,
        signer: Signer,
        pool: DocumentPool,
        codecs: Mapping[DocumentKey, DocumentCodec[Any]],
        *,
        relay_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.signer = signer
        self.pubkey = signer.public_key
        self._pool = pool
        self.codecs = dict(codecs)
        self._timeout = relay_timeout
        self._clock = clock
        self.events = VersionEvents(signer, self.codecs, clock)
        self._listeners = StoreListeners()
        self._slots = {key: Slot(c.empty(), c.to_text(c.empty())) for key, c in self.codecs.items()}
        self._subscription: Any = None
        self._reading = BackgroundTasks()  # versions heard live, being read

    @property
    def keys(self) -> tuple[DocumentKey, ...]:
        return tuple(self.codecs)

    # --- listeners ------------------------------------------------------------------------
    def add_listener(self, cb: ChangeListener) -> Callable[[], None]:
        return self._listeners.add_change(cb)

    def add_warning_listener(self, cb: WarningListener) -> Callable[[], None]:
        return self._listeners.add_warning(cb)

    def add_version_listener(self, cb: VersionListener) -> Callable[[], None]:
        """``cb`` hears of every version seen (relays' and own saves), before the change listeners."""
        return self._listeners.add_version(cb)

    @property
    def warnings(self) -> list[str]:
        return self._listeners.warnings

    @property
    def dropped(self) -> Counter[str]:
        """Events refused, by reason (hostile or stray relays)."""
        return self.events.dropped

    def _notify(self, key: DocumentKey, origin: str) -> None:
        self._listeners.changed(self.snapshot(key), origin)

    # --- reading the cache (never the network) --------------------------------------------
    def codec(self, key: DocumentKey) -> DocumentCodec[Any]:
        return self.codecs[key]

    def limit(self, key: DocumentKey) -> int:
        return self.codec(key).limit_chars

    def snapshot(self, key: DocumentKey) -> DocumentSnapshot:
        codec = self.codecs[key]
        return self._slots[key].snapshot(key, codec.limit_chars, codec.max_bytes)

    def value(self, key: DocumentKey) -> Any:
        return self._slots[key].value

    def current_event(self, key: DocumentKey) -> Event | None:
        return self._slots[key].event

    def relay_versions(self, key: DocumentKey) -> dict[str, tuple[str, int]]:
        """For each relay, the newest version (event id, created_at) it has shown us."""
        return dict(self._slots[key].relay_versions)

    def filters(self, keys: Iterable[DocumentKey] | None = None) -> list[dict[str, Any]]:
        """One filter per kind (the ``d`` tags of that kind together): what to ask the relays for."""
        return self.events.filters(self.keys if keys is None else keys)

    # --- screening and reading versions ----------------------------------------------------
    async def read(self, ev: Event) -> tuple[Any, str]:
        """``ev``'s value and text (decrypted with the signer, decoded by the codec; off the loop). Raises
        DocumentError saying why it cannot be used."""
        return await self.events.read(ev)

    def read_blocking(self, ev: Event, loop: asyncio.AbstractEventLoop, timeout: float = 30.0) -> str:
        """(From a worker thread, never the loop.) ``ev``'s text; DocumentError when it does not read."""
        return asyncio.run_coroutine_threadsafe(self.read(ev), loop).result(timeout)[1]

    def _unusable(self, key: DocumentKey, ev: Event, url: str | None, error: DocumentError) -> None:
        """A valid, newer version that does not read: the document keeps the newest one that does; the bad one is
        remembered (floor, warning, history) so our next save supersedes it."""
        slot = self._slots[key]
        first = self.events.remember_refused(ev, error)
        reason = error.message
        slot.floor_created_at = max(slot.floor_created_at, ev.created_at)
        slot.note_relay(url, ev)
        if slot.event is not None and not is_newer(ev, slot.event):
            return  # older than the version in use: nothing to tell
        if slot.unreadable is None or is_newer(ev, slot.unreadable[0]):
            slot.unreadable = (ev, url or "", error)
        if not first:
            return
        self.dropped["undecryptable" if isinstance(error, UndecryptableError) else "unusable"] += 1
        where = f" on {url}" if url else ""
        keeping = "keeping the previous version" if slot.event is not None else "nothing is taken from it"
        self._listeners.warn(f"the newest {key.title.lower()} version (event {ev.id[:12]}…{where}) cannot be used: "
                             f"{reason}; {keeping}; your next save replaces it")
        self._listeners.seen(VersionSeen(key, ev, "remote", url, False, None, None, unusable=reason))
        self._notify(key, "remote")

    # --- fetching -------------------------------------------------------------------------
    async def load(self, keys: Iterable[DocumentKey] | None = None) -> dict[DocumentKey, DocumentSnapshot]:
        """Fetch the current versions from every relay and use the newest of each that reads.

        A newer version that does not read gives a warning and never replaces the one in use. Relays that fail do
        not count; if none answered, the document stays not ``loaded``.
        """
        wanted = list(self.keys if keys is None else keys)
        failed = False
        try:
            by_relay = await self._pool.query_by_relay(self.filters(wanted), timeout=self._timeout)
        except Exception as exc:  # relay trouble never raises out of a load
            self._listeners.warn(f"could not fetch the agent's documents from the relays: {exc}")
            by_relay, failed = {}, True
        # With no relay at all there is nothing to wait for: the documents are what this device keeps.
        answered = any(events is not None for events in by_relay.values()) or (not by_relay and not failed)
        found: dict[DocumentKey, dict[str, tuple[Event, str]]] = {k: {} for k in wanted}  # id -> (event, relay)
        for url, events in by_relay.items():
            for ev in events or ():
                key = self.events.screen(ev)
                if key is None or key not in found:
                    continue
                self._slots[key].note_relay(url, ev)
                found[key].setdefault(ev.id, (ev, url))
        changed = await asyncio.gather(*(self._load_one(k, found[k], answered) for k in wanted))
        for key, did in zip(wanted, changed, strict=True):
            if did:
                self._notify(key, "remote")
        return {k: self.snapshot(k) for k in wanted}

    async def _load_one(self, key: DocumentKey, found: dict[str, tuple[Event, str]], answered: bool) -> bool:
        slot = self._slots[key]
        became: VersionSeen | None = None
        for ev, url in sorted(found.values(), key=lambda pair: newest_first(pair[0])):
            if slot.event is not None and not is_newer(ev, slot.event):
                break
            if ev.id in self.events.refused:
                self._unusable(key, ev, url, self.events.refused[ev.id])
                continue
            try:
                value, text = await self.read(ev)
            except DocumentError as exc:
                self._unusable(key, ev, url, exc)
                continue
            if slot.event is not None and not is_newer(ev, slot.event):
                break  # a newer one was taken while this one was read
            became = VersionSeen(key, ev, "remote", url, True, slot.event, text)
            slot.adopt(ev, value, text)
            break
        for ev, url in found.values():
            if (became is None or ev.id != became.event.id) and ev.id not in self.events.refused:
                self._listeners.seen(VersionSeen(key, ev, "remote", url, False, None, None))
        if became is not None:
            self._listeners.seen(became)
            return True
        if answered and not slot.loaded:
            slot.loaded = True
            return True
        return False

    async def restore(self, ev: Event, *, origin: str = "local") -> bool:
        """A version this device kept (an unconfirmed save from the outbox, or one from its history) that the
        relays may not hold: it becomes the one in use when it is newer than what the relays gave and reads.
        Returns True when it did."""
        key = self.events.key_of(ev)
        if key is None:
            return False
        slot = self._slots[key]
        # Older than a version known here is not restored, unless that version does not read (then the newest
        # version kept here that reads is the document, never an empty one).
        below_floor = ev.created_at < slot.floor_created_at and slot.unreadable is None
        if below_floor or (slot.event is not None and not is_newer(ev, slot.event)):
            return False
        try:
            value, text = await self.read(ev)
        except DocumentError:
            return False
        if slot.event is not None and not is_newer(ev, slot.event):
            return False
        replaced = slot.event
        slot.adopt(ev, value, text)
        self._listeners.seen(VersionSeen(key, ev, origin, None, True, replaced, text))
        self._notify(key, origin)
        return True

    def ingest(self, url: str | None, ev: Event) -> None:
        """One event from a relay (the live subscription): screened now, read in the background (:meth:`take`)."""
        if self.events.key_of(ev) is None:
            self.events.screen(ev)  # counted
            return
        self._reading.spawn(self.take(url, ev))

    async def take(self, url: str | None, ev: Event) -> bool:
        """One version from a relay: used when it is newer than the one in use and reads. True when it became it."""
        key = self.events.screen(ev)
        if key is None:
            return False
        slot = self._slots[key]
        cur = slot.event
        if cur is not None and (ev.id == cur.id or not is_newer(ev, cur)):
            slot.note_relay(url, ev)
            self._listeners.seen(VersionSeen(key, ev, "remote", url, False, None, None))
            return False
        slot.floor_created_at = max(slot.floor_created_at, ev.created_at)  # a save now is dated after it
        if ev.id in self.events.refused:
            slot.note_relay(url, ev)
            return False
        try:
            value, text = await self.read(ev)
        except DocumentError as exc:
            self._unusable(key, ev, url, exc)
            return False
        slot.note_relay(url, ev)
        cur = slot.event
        if cur is not None and (ev.id == cur.id or not is_newer(ev, cur)):
            return False  # a newer version was taken while this one was read
        slot.adopt(ev, value, text)
        self._listeners.seen(VersionSeen(key, ev, "remote", url, True, cur, text))
        self._notify(key, "remote")
        return True

    def start_live(self) -> None:
        """Subscribe to our own documents so other writers' versions reach the cache."""
        if self._subscription is None:
            self._subscription = self._pool.subscribe(self.filters(), self.ingest)

    async def stop_live(self) -> None:
        sub, self._subscription = self._subscription, None
        if sub is not None:
            result = sub.close()
            if isinstance(result, Awaitable):
                await result
        await self._reading.cancel(1.0)

    # --- this device's own versions (the save pipeline, :mod:`.saving`, is the only caller) ---------------
    def lock(self, key: DocumentKey) -> asyncio.Lock:
        """Saves of one document, one at a time."""
        return self._slots[key].lock

    def floor(self, key: DocumentKey) -> int:
        """The newest date known of ``key`` (a new version is dated after it)."""
        return self._slots[key].floor

    def show_deferred(self, key: DocumentKey, text: str, value: Any) -> None:
        """A burst's newest text, not signed yet (the sync signs it within seconds): shown and used now."""
        slot = self._slots[key]
        slot.text, slot.value, slot.loaded = text, value, True
        self._notify(key, "local")

    def kept_unpublished(self, key: DocumentKey, ev: Event) -> None:
        """``ev``, signed here and never to be published (a refused save): kept in the history, not used."""
        self._listeners.seen(VersionSeen(key, ev, "local", None, False, None, None))

    def adopt_own(self, key: DocumentKey, ev: Event, value: Any, text: str) -> OwnVersion:
        """``ev``, just signed here, is the version in use (before any relay has it: our own echo from the live
        subscription then finds nothing new). What it replaced is returned, for :meth:`withdraw_own`."""
        slot = self._slots[key]
        before = OwnVersion(ev, slot.event, slot.value, slot.text, slot.loaded)
        slot.adopt(ev, value, text)
        self._listeners.seen(VersionSeen(key, ev, "local", None, True, before.replaced, text))
        self._notify(key, "local")
        return before

    def withdraw_own(self, key: DocumentKey, own: OwnVersion) -> None:
        """The version :meth:`adopt_own` put in use was not sent (a newer one is known): the one before is back,
        unless another writer's replaced it meanwhile."""
        slot = self._slots[key]
        if slot.event is own.event:
            slot.event, slot.value, slot.text, slot.loaded = own.replaced, own.value, own.text, own.loaded

    def delivered_own(self, key: DocumentKey, ev: Event, accepted_by: Iterable[str]) -> DocumentSnapshot:
        """The relays' verdicts on our own version ``ev``: those that took it hold it."""
        slot = self._slots[key]
        for url in accepted_by:
            slot.note_relay(url, ev)
        if slot.event is ev:  # else a newer version from another writer arrived meanwhile (already told)
            self._notify(key, "local")
        return self.snapshot(key)

    def warn(self, message: str) -> None:
        self._listeners.warn(message)


@dataclass(frozen=True, slots=True)
class OwnVersion:
    """A version saved here, and the state of its document before it was put in use."""

    event: Event
    replaced: Event | None
    value: Any
    text: str
    loaded: bool
