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
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import AgentError, ConfigError, NostrError
from ...nostr.event import Event
from ...nostr.replaceable import is_newer, is_newer_version, newest_first
from ...nostr.results import PublishOutcome
from ...nostr.signer import Signer
from ..background import BackgroundTasks
from .codec import DocumentCodec, DocumentError, UndecryptableError
from .keys import DocumentKey
from .versions import DatedAheadError, DocumentSnapshot, SaveResult, Unusable, VersionSeen

log = logging.getLogger("didactyl.documents")

SIGN_AHEAD_MAX_S = 5  # we never sign a version dated more than this ahead of our clock
BURST_WAIT_MAX_S = 2.0  # a save waits at most this long for the clock to allow its date (a burst)
MAX_FUTURE_SECONDS = 15 * 60  # a version dated further ahead is refused (it would win forever)


class DocumentPool(Protocol):
    """What the store needs from :class:`didactyl_tui.nostr.pool.RelayPool`."""

    async def publish(self, event: Event, timeout: float = ...) -> PublishOutcome: ...

    async def query_by_relay(self, filters: list[dict[str, Any]], timeout: float = ...) -> dict[str, Any]: ...

    def subscribe(self, filters: list[dict[str, Any]], on_event: Callable[[str, Event], None]) -> Any: ...


ChangeListener = Callable[[DocumentSnapshot, str], None]  # (snapshot, origin "local" | "remote")
WarningListener = Callable[[str], None]
VersionListener = Callable[[VersionSeen], None]
Publisher = Callable[[Event], Awaitable[PublishOutcome]]


@dataclass
class _Slot:
    value: Any
    text: str
    event: Event | None = None  # the version in use
    loaded: bool = False
    floor_created_at: int = 0  # newest created_at seen for this document, even of a version that does not read
    relay_versions: dict[str, tuple[str, int]] = field(default_factory=dict)  # url -> (event id, created_at)
    # The newest version newer than ``event`` that does not read: (event, relay, why).
    unreadable: tuple[Event, str, DocumentError] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # saves of one document, one at a time


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
        self.sign_ahead_max_s = float(sign_ahead_max_s)
        self._slots = {key: _Slot(c.empty(), c.to_text(c.empty())) for key, c in self.codecs.items()}
        self._change_listeners: list[ChangeListener] = []
        self._warning_listeners: list[WarningListener] = []
        self._version_listeners: list[VersionListener] = []
        self._subscription: Any = None
        self._reading = BackgroundTasks()  # versions heard live, being read
        self.dropped: Counter[str] = Counter()  # events refused, by reason (hostile or stray relays)
        self._refused: dict[str, DocumentError] = {}  # ids already found unusable (told once), with why
        self.warnings: list[str] = []

    @property
    def keys(self) -> tuple[DocumentKey, ...]:
        return tuple(self.codecs)

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
            except Exception:  # a broken listener must not break the document path
                log.exception("document version listener failed")

    def _notify(self, key: DocumentKey, origin: str) -> None:
        snap = self.snapshot(key)
        for cb in list(self._change_listeners):
            try:
                cb(snap, origin)
            except Exception:  # a broken listener must not break the document path
                log.exception("document change listener failed")

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self.warnings.append(message)
        del self.warnings[:-100]  # bounded: the listeners have them
        for cb in list(self._warning_listeners):
            try:
                cb(message)
            except Exception:
                log.exception("document warning listener failed")

    # --- reading the cache (never the network) --------------------------------------------
    def codec(self, key: DocumentKey | str) -> DocumentCodec[Any]:
        return self.codecs[DocumentKey.parse(key)]

    def limit(self, key: DocumentKey | str) -> int:
        return self.codec(key).limit_chars

    def snapshot(self, key: DocumentKey | str) -> DocumentSnapshot:
        key = DocumentKey.parse(key)
        slot = self._slots[key]
        ev = slot.event
        holders: tuple[str, ...] = ()
        if ev is not None:
            holders = tuple(sorted(u for u, (eid, _) in slot.relay_versions.items() if eid == ev.id))
        unusable = None
        if slot.unreadable is not None:
            bad, relay, error = slot.unreadable
            unusable = Unusable(bad.id, relay, error.message, isinstance(error, UndecryptableError))
        return DocumentSnapshot(key, slot.text, self.codecs[key].limit_chars, ev.id if ev else None,
                                ev.created_at if ev else None, holders, slot.loaded, unusable, slot.value)

    def value(self, key: DocumentKey | str) -> Any:
        return self._slots[DocumentKey.parse(key)].value

    def current_event(self, key: DocumentKey | str) -> Event | None:
        return self._slots[DocumentKey.parse(key)].event

    def relay_versions(self, key: DocumentKey | str) -> dict[str, tuple[str, int]]:
        """For each relay, the newest version (event id, created_at) it has shown us."""
        return dict(self._slots[DocumentKey.parse(key)].relay_versions)

    def filters(self, keys: Iterable[DocumentKey] | None = None) -> list[dict[str, Any]]:
        """One filter per kind (the ``d`` tags of that kind together): what to ask the relays for."""
        by_kind: dict[int, list[str]] = {}
        for key in self.keys if keys is None else keys:
            by_kind.setdefault(key.kind, [])
            if key.d_tag:
                by_kind[key.kind].append(key.d_tag)
        out: list[dict[str, Any]] = []
        for kind, ds in by_kind.items():
            flt: dict[str, Any] = {"authors": [self.pubkey], "kinds": [kind]}
            if ds:
                flt["#d"] = ds
            out.append(flt)
        return out

    # --- screening and reading versions ----------------------------------------------------
    def version_key(self, ev: Event) -> DocumentKey | None:
        """The document ``ev`` is an acceptable version of, or None (counts nothing)."""
        return self._refusal(ev)[1]

    def _screen(self, ev: Event) -> DocumentKey | None:
        reason, key = self._refusal(ev)
        if reason:
            self.dropped[reason] += 1
            return None
        return key

    def _refusal(self, ev: Event) -> tuple[str, DocumentKey | None]:
        key = DocumentKey.of_event(ev.kind, ev.d_tag)
        if ev.pubkey != self.pubkey:
            return "foreign_author", None
        if key is None or key not in self.codecs:
            return ("wrong_d" if ev.kind in {k.kind for k in self.keys} else "wrong_kind"), None
        if ev.created_at > self._clock() + MAX_FUTURE_SECONDS:
            return "future", None
        if not ev.is_valid():
            return "invalid", None
        return "", key

    async def read(self, ev: Event) -> tuple[Any, str]:
        """``ev``'s value and text (decrypted with the signer, decoded by the codec; off the loop). Raises
        DocumentError saying why it cannot be used."""
        key = self.version_key(ev)
        if key is None:
            raise DocumentError(f"event {ev.id[:12]} is not a version of one of this agent's documents")
        codec = self.codecs[key]
        plain = ev.content
        if codec.is_encrypted(ev):
            try:
                plain = await self.signer.nip44_decrypt(self.pubkey, ev.content)
            except NostrError as exc:
                raise UndecryptableError(f"{codec.where(ev)} does not decrypt with this key ({exc.message})",
                                         codec.title) from None
        try:
            return await asyncio.to_thread(_decode, codec, plain, ev)
        except DocumentError:
            raise
        except (AgentError, ConfigError) as exc:
            raise DocumentError(f"{codec.where(ev)}: {exc.message}", codec.title) from None

    def read_blocking(self, ev: Event, loop: asyncio.AbstractEventLoop, timeout: float = 30.0) -> str:
        """(From a worker thread, never the loop.) ``ev``'s text; DocumentError when it does not read."""
        return asyncio.run_coroutine_threadsafe(self.read(ev), loop).result(timeout)[1]

    def _note_relay(self, slot: _Slot, url: str | None, ev: Event) -> None:
        if not url:
            return
        known = slot.relay_versions.get(url)
        if known is None or is_newer_version(ev.created_at, ev.id, known[1], known[0]):
            slot.relay_versions[url] = (ev.id, ev.created_at)

    def _adopt(self, key: DocumentKey, ev: Event, value: Any, text: str) -> None:
        slot = self._slots[key]
        slot.event, slot.value, slot.text, slot.loaded = ev, value, text, True
        slot.floor_created_at = max(slot.floor_created_at, ev.created_at)
        if slot.unreadable is not None and not is_newer(slot.unreadable[0], ev):
            slot.unreadable = None  # superseded: nothing unusable is newer than the version in use any more

    def _unusable(self, key: DocumentKey, ev: Event, url: str | None, error: DocumentError) -> None:
        """A valid, newer version that does not read: the document keeps the newest one that does; the bad one is
        remembered (floor, warning, history) so our next save supersedes it."""
        slot = self._slots[key]
        first = ev.id not in self._refused
        self._refused[ev.id] = error
        reason = error.message
        while len(self._refused) > 1024:  # bounded: only the agent's key can sign one
            del self._refused[next(iter(self._refused))]
        slot.floor_created_at = max(slot.floor_created_at, ev.created_at)
        self._note_relay(slot, url, ev)
        if slot.event is not None and not is_newer(ev, slot.event):
            return  # older than the version in use: nothing to tell
        if slot.unreadable is None or is_newer(ev, slot.unreadable[0]):
            slot.unreadable = (ev, url or "", error)
        if not first:
            return
        self.dropped["undecryptable" if isinstance(error, UndecryptableError) else "unusable"] += 1
        where = f" on {url}" if url else ""
        keeping = "keeping the previous version" if slot.event is not None else "nothing is taken from it"
        self._warn(f"the newest {key.title.lower()} version (event {ev.id[:12]}…{where}) cannot be used: {reason}; "
                   f"{keeping}; your next save replaces it")
        self._seen(VersionSeen(key, ev, "remote", url, False, None, None, unusable=reason))
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
            self._warn(f"could not fetch the agent's documents from the relays: {exc}")
            by_relay, failed = {}, True
        # With no relay at all there is nothing to wait for: the documents are what this device keeps.
        answered = any(events is not None for events in by_relay.values()) or (not by_relay and not failed)
        found: dict[DocumentKey, dict[str, tuple[Event, str]]] = {k: {} for k in wanted}  # id -> (event, relay)
        for url, events in by_relay.items():
            for ev in events or ():
                key = self._screen(ev)
                if key is None or key not in found:
                    continue
                self._note_relay(self._slots[key], url, ev)
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
            if ev.id in self._refused:
                self._unusable(key, ev, url, self._refused[ev.id])
                continue
            try:
                value, text = await self.read(ev)
            except DocumentError as exc:
                self._unusable(key, ev, url, exc)
                continue
            if slot.event is not None and not is_newer(ev, slot.event):
                break  # a newer one was taken while this one was read
            became = VersionSeen(key, ev, "remote", url, True, slot.event, text)
            self._adopt(key, ev, value, text)
            break
        for ev, url in found.values():
            if (became is None or ev.id != became.event.id) and ev.id not in self._refused:
                self._seen(VersionSeen(key, ev, "remote", url, False, None, None))
        if became is not None:
            self._seen(became)
            return True
        if answered and not slot.loaded:
            slot.loaded = True
            return True
        return False

    async def restore(self, ev: Event, *, origin: str = "local") -> bool:
        """A version this device kept (an unconfirmed save from the outbox, or one from its history) that the
        relays may not hold: it becomes the one in use when it is newer than what the relays gave and reads.
        Returns True when it did."""
        key = self.version_key(ev)
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
        self._adopt(key, ev, value, text)
        self._seen(VersionSeen(key, ev, origin, None, True, replaced, text))
        self._notify(key, origin)
        return True

    def ingest(self, url: str | None, ev: Event) -> None:
        """One event from a relay (the live subscription): screened now, read in the background (:meth:`take`)."""
        if self.version_key(ev) is None:
            self._screen(ev)  # counted
            return
        self._reading.spawn(self.take(url, ev))

    async def take(self, url: str | None, ev: Event) -> bool:
        """One version from a relay: used when it is newer than the one in use and reads. True when it became it."""
        key = self._screen(ev)
        if key is None:
            return False
        slot = self._slots[key]
        cur = slot.event
        if cur is not None and (ev.id == cur.id or not is_newer(ev, cur)):
            self._note_relay(slot, url, ev)
            self._seen(VersionSeen(key, ev, "remote", url, False, None, None))
            return False
        slot.floor_created_at = max(slot.floor_created_at, ev.created_at)  # a save now is dated after it
        if ev.id in self._refused:
            self._note_relay(slot, url, ev)
            return False
        try:
            value, text = await self.read(ev)
        except DocumentError as exc:
            self._unusable(key, ev, url, exc)
            return False
        self._note_relay(slot, url, ev)
        cur = slot.event
        if cur is not None and (ev.id == cur.id or not is_newer(ev, cur)):
            return False  # a newer version was taken while this one was read
        self._adopt(key, ev, value, text)
        self._seen(VersionSeen(key, ev, "remote", url, True, cur, text))
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
        slot = self._slots[DocumentKey.parse(key)]
        floor = max(slot.floor_created_at, slot.event.created_at if slot.event else 0)
        return max(0.0, (floor + 1) - (self._clock() + self.sign_ahead_max_s))

    def _created_at(self, slot: _Slot) -> int:
        floor = max(slot.floor_created_at, slot.event.created_at if slot.event else 0)
        return max(int(self._clock()), floor + 1)

    async def _publish(self, ev: Event) -> PublishOutcome:
        """The one place an event leaves the store (the outbox wraps this)."""
        if self._publisher is not None:
            return await self._publisher(ev)
        return await self._pool.publish(ev, timeout=self._timeout)

    async def _wait_for_clock(self, key: DocumentKey) -> None:
        """(Under the save lock.) Wait, briefly, until the clock allows the next version's date; a version dated
        further ahead than a burst can explain (another device's fast clock) is refused."""
        for _ in range(int(BURST_WAIT_MAX_S * 4) + 2):  # bounded whatever the clock does
            delay = self.sign_delay(key)
            if delay <= 0:
                return
            if delay > BURST_WAIT_MAX_S:
                break
            await asyncio.sleep(min(delay, 0.25))
        slot = self._slots[key]
        floor = max(slot.floor_created_at, slot.event.created_at if slot.event else 0)
        ahead = floor - int(self._clock())
        raise DatedAheadError(
            f"the newest {key.title.lower()} version is dated {ahead} s ahead of this device's clock; a save now "
            f"would have to be dated {ahead + 1} s ahead, more than the {self.sign_ahead_max_s:g} s allowed (is a "
            "clock wrong?)", key.title)

    async def build_event(self, key: DocumentKey, value: Any, created_at: int, base: str | None,
                          *, encrypt: bool = True) -> Event:
        """Encode, encrypt to ourselves (a private document) and sign — through the signer, off the loop."""
        codec = self.codecs[key]
        encoded = codec.encode(value)
        encrypted = key.private and encrypt and encoded.plaintext != ""
        content = await self.signer.nip44_encrypt(self.pubkey, encoded.plaintext) if encrypted else encoded.plaintext
        tags = codec.tags(encoded.tags, base, encrypted=encrypted)
        return await self.signer.sign_event(kind=key.kind, content=content, created_at=created_at, tags=tags)

    def show_deferred(self, key: DocumentKey, text: str, value: Any) -> None:
        """A burst's newest text, not signed yet (the sync signs it within seconds): shown and used now."""
        slot = self._slots[key]
        slot.text, slot.value, slot.loaded = text, value, True
        self._notify(key, "local")

    async def sign_local(self, key: DocumentKey, value: Any) -> Event:
        """A version dated now, based on the current one, that is never published (kept in the history when a
        save is refused before publishing)."""
        slot = self._slots[key]
        ev = await self.build_event(key, value, int(self._clock()), slot.event.id if slot.event else None)
        self._seen(VersionSeen(key, ev, "local", None, False, None, None))
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
                snap = self.snapshot(key)
                if not snap.loaded:
                    raise DocumentError(
                        f"the {key.title.lower()} could not be read from any relay yet (none answered): it is not "
                        "changed, so nothing in it is lost; try again when a relay is reachable", key.title)
                if not snap.known:
                    bad = snap.unreadable
                    raise DocumentError(
                        f"the {key.title.lower()}'s newest version (event {bad.event_id[:12] if bad else '?'}) cannot "
                        f"be used ({bad.reason if bad else 'unknown'}) and no earlier version is known here: it is not "
                        "changed, so nothing in it is lost; replace it as a whole to go on", key.title)
                value = derive(slot.value)
            text = self.codecs[key].to_text(value)
            try:
                await self._wait_for_clock(key)
            except DatedAheadError as exc:
                exc.kept_event_id = (await self.sign_local(key, value)).id
                raise
            created_at = self._created_at(slot)
            ev = await self.build_event(key, value, created_at, base or (slot.event.id if slot.event else None),
                                        encrypt=encrypt)
            # Cache first: our own echo from the live subscription then finds nothing new.
            before = (slot.event, slot.value, slot.text, slot.loaded)
            self._adopt(key, ev, value, text)
            self._seen(VersionSeen(key, ev, "local", None, True, before[0], text))
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
                self._warn(f"publishing the {key.title.lower()} failed: {exc}")
            for url in outcome.accepted_by:
                self._note_relay(slot, url, ev)
            if slot.event is ev:  # else a newer version from another writer arrived meanwhile (already told)
                self._notify(key, "local")
            return SaveResult(key, ev.id, outcome, created_at, self.snapshot(key))


def _decode(codec: DocumentCodec[Any], plaintext: str, ev: Event) -> tuple[Any, str]:
    value = codec.decode(plaintext, ev)
    return value, codec.to_text(value)
