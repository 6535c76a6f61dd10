"""The agent's Nostr memory: short- and long-term text, NIP-44 encrypted to itself, kind 30078.

One addressable event per memory: ``["d","short_term_memory"]`` or ``["d","long_term_memory"]`` plus
``["app","didactyl"]``. Newest wins (NIP-01, ties to the lowest id), wherever a version comes from: the
start-up fetch, our own save, or the live subscription (another device with the same key).

Save path, the only one (the ``memory_save`` tool, the editor and ``didactyl memory save`` all use it):
validate → encrypt → sign → cache → :meth:`MemoryStore._publish` → per-relay verdicts. Bad input raises
:class:`AgentError` before anything is signed. ``_publish`` is the single hook where an outbox goes (the
service injects the memory publisher: outbox first, then the relays, retried until accepted).

Every version the store sees — each relay's, and its own saves — goes to the version listeners
(:class:`VersionSeen`) before the change listeners hear of it, so the service can keep a history and tell
a device whose edit lost to another device's newer one.

An empty memory is sent as an event with empty content: NIP-44 cannot encrypt zero bytes, and an empty
string reveals nothing. Everything runs on the event loop; the caches are only touched there, and saves
are serialized by an ``asyncio.Lock`` so ``created_at`` always moves forward — but never more than
``sign_ahead_max_s`` ahead of the clock, and every version names its base (``["prev", id]``): see
docs/sync.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from ...errors import AgentError, NostrError
from ...nostr import nip44
from ...nostr.event import Event, sign_event
from ...nostr.keys import SecretKey
from ...nostr.kinds import APP_DATA
from ...nostr.replaceable import is_newer, newest_first
from ...nostr.results import PublishOutcome
from .ingest import (
    MAX_FUTURE_SECONDS,  # noqa: F401  (re-exported: it was defined here)
    IngestMixin,
    _Slot,
)
from .lineage import PREV_TAG, prev_tags  # noqa: F401  (PREV_TAG re-exported: it was defined here)
from .versions import (  # re-exported: the store's callers import them from here
    NIP44_MAX_BYTES,
    DatedAheadError,
    MemorySnapshot,
    MemoryType,
    SaveResult,
    VersionSeen,
    validate_memory_content,
)

log = logging.getLogger(__name__)

APP_TAG = ("app", "didactyl")
SIGN_AHEAD_MAX_S = 5  # we never sign a memory version dated more than this ahead of our clock
BURST_WAIT_MAX_S = 2.0  # a save waits at most this long for the clock to allow its date (a burst)

__all__ = ["NIP44_MAX_BYTES", "DatedAheadError", "MemorySnapshot", "MemoryStore", "MemoryType", "SaveResult",
           "VersionSeen", "validate_memory_content"]


class MemoryPool(Protocol):
    """What the store needs from :class:`didactyl_tui.nostr.pool.RelayPool`."""

    async def publish(self, event: Event, timeout: float = ...) -> PublishOutcome: ...

    async def query_by_relay(self, filters: list[dict[str, Any]], timeout: float = ...) -> dict[str, Any]: ...

    def subscribe(self, filters: list[dict[str, Any]], on_event: Callable[[str, Event], None]) -> Any: ...


ChangeListener = Callable[[MemorySnapshot, str], None]  # (snapshot, origin "local" | "remote")
WarningListener = Callable[[str], None]
VersionListener = Callable[[VersionSeen], None]
Publisher = Callable[[Event], Awaitable[PublishOutcome]]


class MemoryStore(IngestMixin):
    def __init__(
        self,
        key: SecretKey,
        pool: MemoryPool,
        *,
        limits: dict[MemoryType, int],
        relay_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        publisher: Publisher | None = None,
        sign_ahead_max_s: float = SIGN_AHEAD_MAX_S,
    ) -> None:
        self._key = key
        self.pubkey = key.public_key_hex
        self._pool = pool
        self._limits = {t: int(limits[t]) for t in MemoryType}
        self._timeout = relay_timeout
        self._clock = clock
        self._publisher = publisher
        self.sign_ahead_max_s = float(sign_ahead_max_s)
        self._conversation_key = nip44.get_conversation_key(key.secret_hex(), self.pubkey)
        self._slots = {t: _Slot() for t in MemoryType}
        self._lock = asyncio.Lock()
        self._change_listeners: list[ChangeListener] = []
        self._warning_listeners: list[WarningListener] = []
        self._version_listeners: list[VersionListener] = []
        self._subscription: Any = None
        self.dropped: Counter[str] = Counter()  # events refused, by reason (hostile or stray relays)
        self._undecryptable: set[str] = set()  # ids already refused as undecryptable: counted and told once
        self.warnings: list[str] = []

    # --- listeners ------------------------------------------------------------------------
    def add_listener(self, cb: ChangeListener) -> Callable[[], None]:
        self._change_listeners.append(cb)
        return lambda: self._change_listeners.remove(cb) if cb in self._change_listeners else None

    def add_warning_listener(self, cb: WarningListener) -> Callable[[], None]:
        self._warning_listeners.append(cb)
        return lambda: self._warning_listeners.remove(cb) if cb in self._warning_listeners else None

    def add_version_listener(self, cb: VersionListener) -> Callable[[], None]:
        """``cb`` hears of every version seen (relays' and own saves), before the change listeners."""
        self._version_listeners.append(cb)
        return lambda: self._version_listeners.remove(cb) if cb in self._version_listeners else None

    def _seen(self, seen: VersionSeen) -> None:
        for cb in list(self._version_listeners):
            try:
                cb(seen)
            except Exception:  # a broken listener must not break the memory path
                log.exception("memory version listener failed")

    def _notify(self, t: MemoryType, origin: str) -> None:
        snap = self.snapshot(t)
        for cb in list(self._change_listeners):
            try:
                cb(snap, origin)
            except Exception:  # a broken listener must not break the memory path
                log.exception("memory change listener failed")

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self.warnings.append(message)
        for cb in list(self._warning_listeners):
            try:
                cb(message)
            except Exception:
                log.exception("memory warning listener failed")

    # --- reading the cache (pure, never the network) --------------------------------------
    def limit(self, t: MemoryType) -> int:
        return self._limits[MemoryType.parse(t)]

    def snapshot(self, t: MemoryType) -> MemorySnapshot:
        t = MemoryType.parse(t)
        slot = self._slots[t]
        ev = slot.event
        holders: tuple[str, ...] = ()
        if ev is not None:
            holders = tuple(sorted(u for u, (eid, _) in slot.relay_versions.items() if eid == ev.id))
        return MemorySnapshot(
            type=t,
            content=slot.content,
            limit_chars=self._limits[t],
            event_id=ev.id if ev else None,
            created_at=ev.created_at if ev else None,
            relays=holders,
            loaded=slot.loaded,
            unreadable=(slot.unreadable[0].id, slot.unreadable[1]) if slot.unreadable else None,
        )

    def current_event(self, t: MemoryType) -> Event | None:
        return self._slots[MemoryType.parse(t)].event

    def relay_versions(self, t: MemoryType) -> dict[str, tuple[str, int]]:
        """For each relay, the newest version (event id, created_at) it has shown us."""
        return dict(self._slots[MemoryType.parse(t)].relay_versions)

    # --- filters --------------------------------------------------------------------------
    def filters(self, types: Iterable[MemoryType] = tuple(MemoryType)) -> list[dict[str, Any]]:
        return [{"authors": [self.pubkey], "kinds": [APP_DATA], "#d": [MemoryType.parse(t).d_tag for t in types]}]

    # --- fetching -------------------------------------------------------------------------
    async def load(self, types: Iterable[MemoryType] = tuple(MemoryType)) -> dict[MemoryType, MemorySnapshot]:
        """Fetch the current versions from every relay (newest wins) and decrypt them.

        A newest version that does not decrypt gives a warning and a blank memory, never a crash.
        Relays that fail simply do not count; if none answered, the memory stays not ``loaded``.
        """
        wanted = [MemoryType.parse(t) for t in types]
        try:
            by_relay = await self._pool.query_by_relay(self.filters(wanted), timeout=self._timeout)
        except Exception as exc:  # relay trouble never raises out of a load
            self._warn(f"could not fetch memory from the relays: {exc}")
            by_relay = {}
        answered = any(events is not None for events in by_relay.values())
        found: dict[MemoryType, dict[str, tuple[Event, str]]] = {t: {} for t in wanted}  # id -> (event, relay)
        for url, events in by_relay.items():
            for ev in events or ():
                t = self._screen(ev)
                if t is None or t not in wanted:
                    continue
                self._note_relay(self._slots[t], url, ev)
                found[t].setdefault(ev.id, (ev, url))
        changed: list[MemoryType] = []
        for t in wanted:
            if self._load_one(t, found[t], answered):
                changed.append(t)
        for t in changed:
            self._notify(t, "remote")
        return {t: self.snapshot(t) for t in wanted}

    def _load_one(self, t: MemoryType, found: dict[str, tuple[Event, str]], answered: bool) -> bool:
        """Adopt the newest fetched version of ``t`` that decrypts (newer ones that do not are warned about
        and recorded, never adopted as blank). Returns True when the memory changed."""
        slot = self._slots[t]
        became: VersionSeen | None = None
        for ev, url in sorted(found.values(), key=lambda pair: newest_first(pair[0])):
            if slot.event is not None and not is_newer(ev, slot.event):
                break
            if ev.id in self._undecryptable:
                continue
            try:
                content = self.decrypt(ev)
            except NostrError as exc:
                self._unreadable(t, ev, url, exc)
                continue
            became = VersionSeen(t, ev, "remote", url, True, slot.event, content)
            self._adopt(t, ev, content)
            break
        for ev, url in found.values():
            if (became is None or ev.id != became.event.id) and ev.id not in self._undecryptable:
                self._seen(VersionSeen(t, ev, "remote", url, False, None, None))
        if became is not None:
            self._seen(became)
            return True
        if answered and not slot.loaded:
            slot.loaded = True
            return True
        return False

    def restore(self, ev: Event, *, origin: str = "local") -> bool:
        """A version this device kept (an unconfirmed save from the outbox, or one from its history) that
        the relays may not hold: it becomes current when it is newer than what the relays gave. Returns
        True when it did."""
        t = self.version_type(ev)
        if t is None:
            return False
        slot = self._slots[t]
        # Older than a version known here is not restored, unless that version is unreadable (then the newest
        # readable one we kept is the memory, never blank).
        below_floor = ev.created_at < slot.floor_created_at and slot.unreadable is None
        if below_floor or (slot.event is not None and not is_newer(ev, slot.event)):
            return False
        try:
            content = self.decrypt(ev)
        except NostrError:
            return False
        replaced = slot.event
        self._adopt(t, ev, content)
        self._seen(VersionSeen(t, ev, origin, None, True, replaced, content))
        self._notify(t, origin)
        return True

    async def load_long_term(self) -> MemorySnapshot:
        """The long-term memory from the cache, else fetched from the relays."""
        if self._slots[MemoryType.LONG_TERM].loaded:
            return self.snapshot(MemoryType.LONG_TERM)
        return (await self.load([MemoryType.LONG_TERM]))[MemoryType.LONG_TERM]

    def start_live(self) -> None:
        """Subscribe to our own kind 30078 memories so other devices' edits reach the cache."""
        if self._subscription is None:
            self._subscription = self._pool.subscribe(self.filters(), self.ingest)

    async def stop_live(self) -> None:
        sub, self._subscription = self._subscription, None
        if sub is not None:
            result = sub.close()
            if isinstance(result, Awaitable):
                await result

    # --- saving ---------------------------------------------------------------------------
    def validate(self, t: MemoryType, content: Any) -> str:
        t = MemoryType.parse(t)
        return validate_memory_content(t, content, self._limits[t])

    def build_event(self, t: MemoryType, content: str, created_at: int, base: str | None = None) -> Event:
        """Encrypt to ourselves and sign (no I/O). ``base``: the id of the version this edit started from."""
        payload = nip44.encrypt(content, self._conversation_key) if content else ""
        tags = [["d", t.d_tag], list(APP_TAG), *prev_tags(base)]
        return sign_event(self._key, kind=APP_DATA, content=payload, created_at=created_at, tags=tags)

    def sign_delay(self, t: MemoryType) -> float:
        """Seconds until a new version of ``t`` can be dated after every version we know without being dated
        more than ``sign_ahead_max_s`` ahead of the clock (0: now)."""
        slot = self._slots[MemoryType.parse(t)]
        floor = max(slot.floor_created_at, slot.event.created_at if slot.event else 0)
        return max(0.0, (floor + 1) - (self._clock() + self.sign_ahead_max_s))

    def _created_at(self, slot: _Slot) -> int:
        floor = max(slot.floor_created_at, slot.event.created_at if slot.event else 0)
        return max(int(self._clock()), floor + 1)

    async def _publish(self, ev: Event) -> PublishOutcome:
        """The one place an event leaves the store (an outbox wraps this)."""
        if self._publisher is not None:
            return await self._publisher(ev)
        return await self._pool.publish(ev, timeout=self._timeout)

    async def _wait_for_clock(self, t: MemoryType) -> None:
        """(Under the save lock.) Wait, briefly, until the clock allows the next version's date; a version
        dated further ahead than a burst can explain (another device's fast clock) is refused."""
        for _ in range(int(BURST_WAIT_MAX_S * 4) + 2):  # bounded whatever the clock does
            delay = self.sign_delay(t)
            if delay <= 0:
                return
            if delay > BURST_WAIT_MAX_S:
                break
            await asyncio.sleep(min(delay, 0.25))
        slot = self._slots[t]
        floor = max(slot.floor_created_at, slot.event.created_at if slot.event else 0)
        ahead = floor - int(self._clock())
        raise DatedAheadError(
            f"the newest {t.title.lower()} version is dated {ahead} s ahead of this device's clock; a save now "
            f"would have to be dated {ahead + 1} s ahead, more than the {self.sign_ahead_max_s:g} s allowed (is a "
            "clock wrong?)", "Memory")

    def show_deferred(self, t: MemoryType, content: str) -> None:
        """A burst's newest text, not signed yet (MemorySync signs it within seconds): shown and used now."""
        slot = self._slots[MemoryType.parse(t)]
        slot.content, slot.loaded = content, True
        self._notify(MemoryType.parse(t), "local")

    def sign_local(self, t: MemoryType, content: str) -> Event:
        """A version dated now, based on the current one, that is never published (kept in the history when a
        save is refused before publishing)."""
        slot = self._slots[t]
        ev = self.build_event(t, content, int(self._clock()), slot.event.id if slot.event else None)
        self._seen(VersionSeen(t, ev, "local", None, False, None, None))
        return ev

    async def save(self, t: MemoryType | str, content: str, *, base: str | None = None) -> SaveResult:
        """Validate, encrypt to self, sign, cache, publish to every relay; per-relay verdicts back.

        The version names its base (``["prev", id]``: the version the store held) and is dated after every
        version known, never more than ``sign_ahead_max_s`` ahead of the clock (it waits up to
        ``BURST_WAIT_MAX_S`` for the clock; a version dated further ahead raises :class:`DatedAheadError`).
        ``base``: the version the text was written on when not the one held now (a burst's deferred text).
        Raises AgentError for bad input before anything is published, and when the publisher already
        knows a newer version (another device's; nothing is sent and the cache is left as it was).
        Relay failures do not raise: they are in the outcome (``any_accepted`` False when no relay took it).
        """
        t = MemoryType.parse(t)
        content = self.validate(t, content)
        async with self._lock:
            slot = self._slots[t]
            try:
                await self._wait_for_clock(t)
            except DatedAheadError as exc:
                exc.kept_event_id = self.sign_local(t, content).id
                raise
            created_at = self._created_at(slot)
            # Encrypting and signing off the loop: the UI shares it.
            ev = await asyncio.to_thread(self.build_event, t, content, created_at,
                                         base or (slot.event.id if slot.event else None))
            # Cache first: our own echo from the live subscription then finds nothing new.
            before = (slot.event, slot.content, slot.loaded)
            self._adopt(t, ev, content)
            self._seen(VersionSeen(t, ev, "local", None, True, before[0], content))
            try:
                outcome = await self._publish(ev)
            except AgentError:
                # The publisher knows a newer version than this one (another device's): it was not sent.
                if slot.event is ev:
                    slot.event, slot.content, slot.loaded = before
                raise
            except Exception as exc:  # the pool reports per relay; anything else is a bug we still survive
                log.exception("memory publish failed")
                outcome = PublishOutcome(ev.id, {})
                self._warn(f"publishing the {t.title.lower()} failed: {exc}")
            for url in outcome.accepted_by:
                self._note_relay(slot, url, ev)
            if slot.event is ev:  # else a newer version from another device arrived meanwhile (already told)
                self._notify(t, "local")
            return SaveResult(t, ev.id, outcome, created_at, self.snapshot(t))
