"""The agent's documents on Nostr, read and written the same way whatever they are.

One slot per document (:class:`~.keys.DocumentKey`). Newest wins (NIP-01, ties to the lowest id), wherever a version
comes from: the start-up fetch, our own save, the live subscription (another device, the CLI, any client with the
key), or this device's outbox and history. A version is *used* only when it reads: it decrypts with the agent's key
(through the :class:`~didactyl_tui.nostr.signer.Signer`) and the document's codec accepts it. A newer version that
does not read never replaces the one in use and is never taken as empty: it is warned about (the event named),
recorded, shown in the snapshot (``unreadable``), and our next save is dated after it (it supersedes it).

Save path, the only one (the tools, the editor, the CLI, rollback and merges all come here through the sync):
check (the codec) → date after every version known, never more than ``sign_ahead_max_s`` ahead of the clock → name
the base (``["prev", id]``) → encrypt and sign (the signer) → cache → :meth:`DocumentStore._publish` (the outbox) →
per-relay verdicts. Bad input raises :class:`~.codec.DocumentError` before anything is signed.

Every version the store sees goes to the version listeners (:class:`~.versions.VersionSeen`) before the change
listeners hear of it, so the sync can keep a history and judge concurrent edits (docs/sync.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from ...errors import AgentError
from ...nostr.event import Event
from ...nostr.replaceable import is_newer, newest_first
from ...nostr.results import PublishOutcome
from ...nostr.signer import Signer
from ..background import BackgroundTasks
from .codec import DocumentCodec, DocumentError, UndecryptableError
from .dating import SIGN_AHEAD_MAX_S, VersionDating
from .events import VersionEvents
from .keys import DocumentKey
from .listeners import ChangeListener, StoreListeners, VersionListener, WarningListener
from .slots import Slot
from .versions import DatedAheadError, DocumentSnapshot, SaveResult, VersionSeen

log = logging.getLogger("didactyl.documents")


class DocumentPool(Protocol):
    """What the store needs from :class:`didactyl_tui.nostr.pool.RelayPool`."""

    async def publish(self, event: Event, timeout: float = ...) -> PublishOutcome: ...

    async def query_by_relay(self, filters: list[dict[str, Any]], timeout: float = ...) -> dict[str, Any]: ...

    def subscribe(self, filters: list[dict[str, Any]], on_event: Callable[[str, Event], None]) -> Any: ...


Publisher = Callable[[Event], Awaitable[PublishOutcome]]


class DocumentStore:
    def __init__(
        self,
        signer: Signer,
        pool: DocumentPool,
        codecs: Mapping[DocumentKey, DocumentCodec[Any]],
        *,
        relay_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        publisher: Publisher | None = None,
        sign_ahead_max_s: float = SIGN_AHEAD_MAX_S,
    ) -> None:
        self.signer = signer
        self.pubkey = signer.public_key
        self._pool = pool
        self.codecs = dict(codecs)
        self._timeout = relay_timeout
        self._clock = clock
        self._publisher = publisher
        self.dating = VersionDating(clock, sign_ahead_max_s)
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
    def codec(self, key: DocumentKey | str) -> DocumentCodec[Any]:
        return self.codecs[DocumentKey.parse(key)]

    def limit(self, key: DocumentKey | str) -> int:
        return self.codec(key).limit_chars

    def snapshot(self, key: DocumentKey | str) -> DocumentSnapshot:
        key = DocumentKey.parse(key)
        codec = self.codecs[key]
        return self._slots[key].snapshot(key, codec.limit_chars, codec.max_bytes)

    def value(self, key: DocumentKey | str) -> Any:
        return self._slots[DocumentKey.parse(key)].value

    def current_event(self, key: DocumentKey | str) -> Event | None:
        return self._slots[DocumentKey.parse(key)].event

    def relay_versions(self, key: DocumentKey | str) -> dict[str, tuple[str, int]]:
        """For each relay, the newest version (event id, created_at) it has shown us."""
        return dict(self._slots[DocumentKey.parse(key)].relay_versions)

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
        wanted = list(self.keys if keys is None else (DocumentKey.parse(k) for k in keys))
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

    # --- saving ---------------------------------------------------------------------------
    def from_text(self, key: DocumentKey | str, text: str) -> Any:
        """An edit's text as the document's value (checked). DocumentError says what is wrong."""
        key = DocumentKey.parse(key)
        if not isinstance(text, str):
            raise DocumentError(f"{key.title} content must be text", key.title)
        return self.codecs[key].from_text(text, self._slots[key].value, int(self._clock()))

    async def save_text(self, key: DocumentKey | str, text: str, **options: Any) -> SaveResult:
        """:meth:`save` of an edit's text (checked by the codec first: nothing is signed when it is refused)."""
        return await self.save(key, self.from_text(key, text), **options)

    def sign_delay(self, key: DocumentKey | str) -> float:
        """Seconds until a new version can be dated after every version we know without being dated more than
        ``sign_ahead_max_s`` ahead of the clock (0: now)."""
        return self.dating.delay(self._slots[DocumentKey.parse(key)].floor)

    async def _publish(self, ev: Event) -> PublishOutcome:
        """The one place an event leaves the store (the outbox wraps this)."""
        if self._publisher is not None:
            return await self._publisher(ev)
        return await self._pool.publish(ev, timeout=self._timeout)

    def show_deferred(self, key: DocumentKey, text: str, value: Any) -> None:
        """A burst's newest text, not signed yet (the sync signs it within seconds): shown and used now."""
        slot = self._slots[key]
        slot.text, slot.value, slot.loaded = text, value, True
        self._notify(key, "local")

    async def sign_local(self, key: DocumentKey, value: Any) -> Event:
        """A version dated now, based on the current one, that is never published (kept in the history when a
        save is refused before publishing)."""
        slot = self._slots[key]
        ev = await self.events.build(key, value, int(self._clock()), slot.event.id if slot.event else None)
        self._listeners.seen(VersionSeen(key, ev, "local", None, False, None, None))
        return ev

    async def save(self, key: DocumentKey | str, value: Any, *, base: str | None = None,
                   encrypt: bool = True, derive: Callable[[Any], Any] | None = None,
                   adopted: asyncio.Event | None = None) -> SaveResult:
        """Sign and publish ``value`` as a new version of ``key`` (checked by the caller: :meth:`from_text`); with
        ``derive``, the value is ``derive(value in use)``, computed under the document's lock (a task added to the
        list as it is now). Per-relay verdicts come back.

        The version names its base (the version it was edited from: ``base``, else the one in use) and is dated
        after every version known, never more than ``sign_ahead_max_s`` ahead of the clock (it waits up to
        ``BURST_WAIT_MAX_S``; further ahead raises :class:`DatedAheadError`). A derived change of a document whose
        newest version does not read (and no older one does either) is refused: it would publish over what it
        cannot see. Raises AgentError when the publisher already knows a newer version (nothing is sent; the cache
        is left as it was). Relay failures do not raise: they are in the outcome. ``adopted`` is set once the new
        version is in use here (before the relays answer), or when the save ends without one."""
        try:
            return await self._save(DocumentKey.parse(key), value, base, encrypt, derive, adopted)
        finally:
            if adopted is not None:
                adopted.set()

    async def _save(self, key: DocumentKey, value: Any, base: str | None, encrypt: bool,
                    derive: Callable[[Any], Any] | None, adopted: asyncio.Event | None) -> SaveResult:
        slot = self._slots[key]
        async with slot.lock:
            if derive is not None:
                self.snapshot(key).check_changeable()
                value = derive(slot.value)
            text = self.codecs[key].to_text(value)
            try:
                await self.dating.wait(key, lambda: slot.floor)
            except DatedAheadError as exc:
                exc.kept_event_id = (await self.sign_local(key, value)).id
                raise
            created_at = self.dating.created_at(slot.floor)
            ev = await self.events.build(key, value, created_at, base or (slot.event.id if slot.event else None),
                                        encrypt=encrypt)
            # Cache first: our own echo from the live subscription then finds nothing new.
            before = (slot.event, slot.value, slot.text, slot.loaded)
            slot.adopt(ev, value, text)
            self._listeners.seen(VersionSeen(key, ev, "local", None, True, before[0], text))
            self._notify(key, "local")  # in use from now on (the relays' answers come with the next notice)
            if adopted is not None:
                adopted.set()
            try:
                outcome = await self._publish(ev)
            except AgentError:
                # The publisher knows a newer version than this one (another writer's): it was not sent.
                if slot.event is ev:
                    slot.event, slot.value, slot.text, slot.loaded = before
                raise
            except Exception as exc:  # the pool reports per relay; anything else is a bug we still survive
                log.exception("document publish failed")
                outcome = PublishOutcome(ev.id, {})
                self._listeners.warn(f"publishing the {key.title.lower()} failed: {exc}")
            for url in outcome.accepted_by:
                slot.note_relay(url, ev)
            if slot.event is ev:  # else a newer version from another writer arrived meanwhile (already told)
                self._notify(key, "local")
            return SaveResult(key, ev.id, outcome, created_at, self.snapshot(key))

