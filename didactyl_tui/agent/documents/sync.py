"""Document sync: versions, bases and conflicts between this device, other writers and the relays — for every
document alike.

- :meth:`DocumentSync.save` (a text) and :meth:`DocumentSync.save_value` / :meth:`DocumentSync.update` (a value, or
  a change of the value in use) are THE paths that publish a document: the tools, the editor, the CLI, rollback
  and merges all call them. A save refused because another writer's newer version is known is noted in the
  history and the newer version is fetched, whoever saved.
- Every version the store sees is kept in the history. A newer version built on this device's latest save is a
  later edit (adopted quietly); one edited from an older version is a concurrent edit: the lost-edit listeners are
  told (once), the edit stays in the history (see :mod:`didactyl_tui.agent.documents.lineage` and docs/sync.md).
- A version that cannot be used is recorded with the reason (``not used: …``); at start the newest version this
  device kept that reads is the document when the relays' newest does not (:meth:`restore_newest_known`).
- A burst of saves (the clock would not allow a date after the last one without signing ahead of it) is coalesced
  when the caller does not wait, and an edit made while the remote signer does not answer waits for it (kept on
  disk): shown at once, signed as soon as it can be (:mod:`.deferred`).
- After start and after reconnects (rate-limited) each relay is asked which version of every document it holds,
  and lagging ones get the newest (:meth:`DocumentSync.check`).

The history is SQLite: every read and write of it runs on one worker thread, in order, never on the event loop.
Trouble is reported through ``warn``, never raised out of a background path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ...errors import AgentError, SignerUnreachableError
from ...nostr.event import Event
from ...nostr.replaceable import is_newer, newest_first
from ...nostr.results import ConnectionState, PublishOutcome
from ..background import BackgroundTasks
from .codec import DocumentError
from .consensus import ConsensusCheck, RelayHolding, acknowledged_not_shown
from .dating import BURST_WAIT_MAX_S
from .deferred import DeferredSaves, UnsignedEdits
from .history import REFUSED_NOTE, UNUSABLE_NOTE, MemoryHistory, MemoryVersion, usable_note
from .keys import DocumentKey
from .lineage import lost_local_edit
from .outbox import REFUSED as OUTBOX_REFUSED
from .outbox import Outbox
from .publisher import MemoryPublisher
from .store import DocumentStore
from .versions import DatedAheadError, NewerVersionKnown, SaveResult, VersionSeen

log = logging.getLogger("didactyl.documents.sync")

RECONCILE_MIN_INTERVAL_S = 10.0  # at most one relay-consensus check per this many seconds after reconnects
RECONCILE_START_DELAY_S = 1.0  # the first check waits for the outbox's first retries (and a CLI command's own)
RESTORE_CANDIDATES = 8  # versions from the history tried at start when the relays' newest does not read

R = TypeVar("R")


def _not_saved(key: DocumentKey, why: str) -> NewerVersionKnown:
    return NewerVersionKnown(f"the {key.title.lower()} was not saved: {why}; your text is kept in the memory history "
                             f"(`didactyl memory history --type {key.value}`)", key.title)


class DocumentSync:
    def __init__(
        self,
        store: DocumentStore,
        publisher: MemoryPublisher,
        outbox: Outbox,
        history: MemoryHistory,
        *,
        warn: Callable[[str], None],
        repairs: bool = True,
        not_repaired: frozenset[DocumentKey] = frozenset(),
        unsigned: UnsignedEdits | None = None,
    ) -> None:
        """``repairs``: False for read-only commands (no consensus check republishes to lagging relays);
        ``not_repaired``: documents never copied to a lagging relay (the public relay list while this run's relays
        are an override: copying it to them would publish it there)."""
        self.store, self.publisher, self.outbox, self.history = store, publisher, outbox, history
        self._warn = warn
        self._lost_listeners: list[Callable[[DocumentKey, str, str], None]] = []
        self._loop = asyncio.get_running_loop()
        self._history_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="document-history")
        self._history_error: str | None = None
        self._last_local: dict[DocumentKey, str] = {}  # document -> the last version saved here
        self._tasks = BackgroundTasks()  # cancelled at stop, never waited for
        # A burst's newest text, or an edit waiting for the remote signer: shown now, signed later.
        self.deferred = DeferredSaves(store, self._save_now, self._tasks.spawn, warn, BURST_WAIT_MAX_S, unsigned)
        self._checking = False  # relay (re)connects trigger checks only once start-up is done (start_checks)
        self.reconcile_interval_s = RECONCILE_MIN_INTERVAL_S
        self.repairs = repairs
        self.not_repaired = not_repaired
        self._reconcile_lock = asyncio.Lock()
        self._reconcile_task: asyncio.Task[Any] | None = None
        self._reconcile_again = False
        self._last_reconcile = float("-inf")
        store.add_version_listener(self._version_seen)

    # --- the history, on its own thread ------------------------------------------------------------
    def _guarded(self, fn: Callable[..., R], *args: Any) -> R | None:
        """(On the history thread.) A locked or broken file gives one warning, never an exception."""
        try:
            result = fn(*args)
        except (AgentError, sqlite3.Error) as exc:  # locked by another program, or closed at stop
            message = exc.message if isinstance(exc, AgentError) else str(exc)
            if message != self._history_error:
                self._loop.call_soon_threadsafe(self._warn, f"document history: {message}")
            self._history_error = message
            return None
        self._history_error = None
        return result

    async def _history(self, fn: Callable[..., R], *args: Any) -> R | None:
        return await self._loop.run_in_executor(self._history_thread, self._guarded, fn, *args)

    async def versions(self, key: DocumentKey) -> list[MemoryVersion]:
        """This key's versions of document ``key``, newest first."""
        return await self._history(self.history.versions, key.d_tag, self.store.pubkey, key.kind) or []

    async def annotate(self, event_id: str, note: str) -> None:
        await self._history(self.history.annotate, event_id, note)

    # --- every version seen ------------------------------------------------------------------------
    def _version_seen(self, seen: VersionSeen) -> None:
        """(Store listener, on the loop.) Judge and keep ``seen`` on the history thread, in arrival order."""
        if seen.origin == "local" and seen.became_current:
            self._last_local[seen.type] = seen.event.id
        judge = seen.origin != "local" and seen.became_current
        self._history_thread.submit(self._judge_and_record, seen, judge)
        if seen.origin == "remote":
            self._tasks.spawn(self._note_remote(seen.event))

    def _judge_and_record(self, seen: VersionSeen, judge: bool) -> None:
        lost = self._guarded(self._lost_local_edit, seen) if judge else None
        note = f"{UNUSABLE_NOTE}{seen.unusable}" if seen.unusable else ""
        self._guarded(self.history.record, seen.event, seen.origin, note)
        if seen.unusable:
            self._guarded(self._note_unusable, seen.event.id, note)
        if seen.origin == "remote" and not seen.unusable:
            self._guarded(self.history.mark_delivered, seen.event.id)  # a relay serves it: others can read it
        if lost is not None:
            self._loop.call_soon_threadsafe(self._tell_lost, seen.type, lost, seen.event.id)

    def _note_unusable(self, event_id: str, note: str) -> None:
        known = self.history.get(event_id)
        if known is not None and usable_note(known.note):  # seen before it was judged (e.g. as an older version)
            self.history.annotate(event_id, note)

    def _tell_lost(self, key: DocumentKey, lost_event_id: str, winner_id: str) -> None:
        self._warn(f"concurrent edit of the {key.title.lower()}: your version {lost_event_id[:8]} and another "
                   f"writer's version {winner_id[:8]} were both edited from an older version; theirs (newer) is now "
                   "in use and yours is kept in the memory history; to merge, open the merge view in the app, or print "
                   f"yours with `didactyl memory show --type {key.value} --version {lost_event_id[:8]}` and save the "
                   "merged text")
        for cb in list(self._lost_listeners):
            try:
                cb(key, lost_event_id, winner_id)
            except Exception:  # a listener's bug must not break the sync
                log.exception("lost-edit listener failed")

    def add_lost_listener(self, cb: Callable[[DocumentKey, str, str], None]) -> None:
        """``cb(key, lost event id, winner event id)``: this device's edit and another writer's were concurrent;
        theirs won."""
        self._lost_listeners.append(cb)

    async def _note_remote(self, ev: Event) -> None:
        try:
            await self.publisher.note_remote(ev)
        except Exception:  # the outbox reports its own trouble through on_change
            log.exception("noting a remote version failed")

    def _lost_local_edit(self, seen: VersionSeen) -> str | None:
        """(On the history thread.) The id of this device's latest save when ``seen`` (a newer version that
        replaced it) is a concurrent edit — annotated as lost; None for a later edit, or nothing of ours."""
        def same_text(ours: Event) -> bool:
            try:
                return self.store.read_blocking(ours, self._loop) == seen.content
            except (DocumentError, TimeoutError):
                return True  # ours does not read: nothing to merge
        replaced = seen.replaced.id if seen.replaced is not None else None
        return lost_local_edit(self.history, self.store.pubkey, seen.event, replaced, same_text)

    async def restore_newest_known(self) -> None:
        """The newest version this device knows — an edit the relays did not confirm before the last run ended, or
        a version the relays have since lost, or the last good one when the relays' newest does not read — is still
        the document: used (and sent by the retry loop or the consensus check) unless the relays gave something
        newer that reads."""
        await asyncio.gather(*(self._restore(key) for key in self.store.keys))
        await self.deferred.restore()  # edits a previous run kept for the signer: shown, signed once it answers

    async def _restore(self, key: DocumentKey) -> None:
        candidates: list[tuple[Event, str]] = []
        try:
            entry = await asyncio.to_thread(self.outbox.latest, key.address(self.store.pubkey))
        except AgentError:
            entry = None
        if entry is not None and entry.state != OUTBOX_REFUSED:
            candidates.append((entry.event, "local"))
        kept = [v for v in (await self.versions(key)) if usable_note(v.note)][:RESTORE_CANDIDATES]
        candidates += [(v.event, v.origin) for v in kept]
        for ev, origin in sorted(candidates, key=lambda pair: newest_first(pair[0])):
            if await self.store.restore(ev, origin=origin):
                break

    # --- the one save path --------------------------------------------------------------------------
    async def save(self, key: DocumentKey | str, text: str, *, wait: bool = True,
                   encrypt: bool = True) -> SaveResult:
        """Publish ``text`` as a new version of document ``key``. Bad input raises DocumentError before anything
        is published; a newer version from another writer raises :class:`NewerVersionKnown` (nothing published,
        the text kept in the history, the newer version fetched).

        In a burst of saves the next date would be more than the allowed seconds ahead of the clock: with
        ``wait`` the save waits (briefly) for the clock; without it (the agent's tool) the text is kept and
        shown at once, and the newest text of the burst is signed and sent as soon as the clock allows
        (``SaveResult.deferred``)."""
        key = DocumentKey.parse(key)
        value = self.store.from_text(key, text)
        delay = self.store.sign_delay(key)
        # Only a burst is coalesced: a version dated far ahead (a fast clock elsewhere) is refused now, below.
        if not wait and (key in self.deferred or 0 < delay <= BURST_WAIT_MAX_S):
            self.deferred.keep(key, value)
            return self._deferred_result(key)
        await self.deferred.discard(key)  # this newer text supersedes a text not signed yet
        return await self._save_now(key, value, encrypt=encrypt)

    async def save_coalescing(self, key: DocumentKey | str, text: str) -> SaveResult:
        """The agent's ``memory_save``: never waits for the clock (a burst is coalesced)."""
        return await self.save(key, text, wait=False)

    async def save_value(self, key: DocumentKey | str, value: Any, *, encrypt: bool = True,
                         adopted: asyncio.Event | None = None) -> SaveResult:
        """Publish a value built by the caller (checked by the codec as it is encoded). ``adopted``: set once the
        version is in use here, before the relays answer."""
        key = DocumentKey.parse(key)
        await self.deferred.discard(key)
        return await self._save_now(key, value, encrypt=encrypt, adopted=adopted)

    async def update(self, key: DocumentKey | str, derive: Callable[[Any], Any], *, wait: bool = True) -> SaveResult:
        """Publish ``derive(the value in use)``, computed under the document's save lock (a task added to the list as
        it is now, a line inserted into a memory). Refused when the newest version does not read and no earlier one
        is known (see :meth:`DocumentStore.save`). With the signer away the new value waits for it as an edit does
        (``SaveResult.deferred``); a change while a text waits (for the signer or the clock) is made to that text.
        Without ``wait`` (the agent's partial edits) a burst is coalesced as :meth:`save` does."""
        key = DocumentKey.parse(key)
        if key in self.deferred or (not wait and 0 < self.store.sign_delay(key) <= BURST_WAIT_MAX_S):
            self.store.snapshot(key).check_changeable()  # the text waiting is the one in use: the change is made to it
            await self.deferred.change(key, derive(self.store.value(key)))
            return self._deferred_result(key)
        derived: list[Any] = []

        def keeping(value: Any) -> Any:  # what the change made, kept should the signer not answer
            derived.append(derive(value))
            return derived[-1]

        try:
            return await self._save_now(key, None, derive=keeping)
        except SignerUnreachableError as exc:
            if not derived:
                raise
            await self.deferred.wait_for_signer(key, derived[-1], None, exc)
            return self._deferred_result(key)

    async def _save_now(self, key: DocumentKey, value: Any, base: str | None = None, *, encrypt: bool = True,
                        derive: Callable[[Any], Any] | None = None,
                        adopted: asyncio.Event | None = None) -> SaveResult:
        before = self._last_local.get(key)
        try:
            result = await self.store.save(key, value, base=base, encrypt=encrypt, derive=derive, adopted=adopted)
        except DatedAheadError as exc:
            if exc.kept_event_id:
                await self.annotate(exc.kept_event_id, f"not published: {exc.message}")
            raise _not_saved(key, exc.message) from None
        except DocumentError:
            raise  # bad input, or a derived change of a document that does not read: nothing was signed
        except SignerUnreachableError as exc:  # the key is in a remote signer that does not answer
            if value is None:
                raise  # a change of the value in use (a task added): kept by update() with the value it made
            await self.deferred.wait_for_signer(key, value, base, exc)
            return self._deferred_result(key)
        except AgentError as exc:
            refused = self._last_local.pop(key, None)
            if before is not None:
                self._last_local[key] = before
            if refused is not None and refused != before:
                await self.annotate(refused, REFUSED_NOTE)
            self._tasks.spawn(self.store.load([key]))  # fetch the newer version the publisher knows of
            raise _not_saved(key, exc.message) from None
        if result.any_accepted:
            await self._history(self.history.mark_delivered, result.event_id)
        return result

    def _deferred_result(self, key: DocumentKey) -> SaveResult:
        return SaveResult(key, "", PublishOutcome("", {}), 0, self.store.snapshot(key), deferred=True)

    async def flush(self, timeout: float) -> None:
        """Send what a burst left unsigned (at stop): waits for the clock, at most ``timeout`` seconds (an edit
        waiting for the signer stays on disk for the next start)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.deferred.flush()

    # --- relay consensus ----------------------------------------------------------------------------
    def relay_state_changed(self, url: str, state: ConnectionState) -> None:
        if state is not ConnectionState.CONNECTED or not self._checking:
            return
        self.publisher.wake()  # retry what this relay missed now, not at the next backoff
        self.schedule_reconcile()

    def start_checks(self, delay: float) -> None:
        """Start-up is done: relay (re)connects trigger checks from now on, and every relay is checked in ``delay``."""
        self._checking = True
        self.schedule_reconcile(delay=delay)

    def stop_checks(self) -> None:  # shutting down: a relay that reconnects now is not checked
        self._checking = False

    def schedule_reconcile(self, delay: float = 0.0) -> None:
        """Check every relay's versions of every document soon: at most once per ``reconcile_interval_s``."""
        if not self.repairs:
            return
        if self._reconcile_task is not None and not self._reconcile_task.done():
            self._reconcile_again = True
            return
        self._reconcile_task = self._tasks.spawn(self._reconcile_soon(delay))

    async def _reconcile_soon(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        if delay > 0:
            await asyncio.sleep(delay)
        while True:
            wait = self._last_reconcile + self.reconcile_interval_s - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._reconcile_again = False
            self._last_reconcile = loop.time()
            for key in self.store.keys:
                if key in self.not_repaired:
                    continue
                try:
                    check = await self.check(key, fix=True)
                except Exception:  # relay trouble shows in the relay states; never out of a background check
                    log.exception("checking the relays' %s failed", key.value)
                    continue
                if check.outcome is not None and check.outcome.accepted_by:
                    log.info("brought %s up to date on %s", key.value, ", ".join(check.outcome.accepted_by))
            if not self._reconcile_again:
                return

    async def check(self, key: DocumentKey | str, *, fix: bool) -> ConsensusCheck:
        """Ask every relay which version of ``key`` it holds; with ``fix``, lagging ones get the newest."""
        async with self._reconcile_lock:
            return await self._check(DocumentKey.parse(key), fix=fix)

    async def _check(self, key: DocumentKey, *, fix: bool) -> ConsensusCheck:
        store, publisher = self.store, self.publisher
        # Whatever the outbox has due goes out first, so what the relays hold is looked at settled, not
        # mid-flight (finishing a save already waiting is not a new write: done with or without ``fix``).
        await publisher.retry_due()
        best, holdings = await publisher.relay_versions(store.pubkey, key.kind, key.d_tag)
        holdings = list(holdings)
        if best is not None and store.events.key_of(best) is key:
            for h in holdings:
                if h.event_id == best.id:
                    await store.take(h.url, best)  # newer than the one in use: used when it reads (and kept)
        # The newest the store accepts: a relay's (now in use) or this device's own newer save.
        target = store.current_event(key)
        outcome: PublishOutcome | None = None
        # A newer version the store refused (dated too far ahead, or not readable) is not overwritten.
        if fix and key not in self.not_repaired and target is not None and (best is None or not is_newer(best, target)):
            outcome = await publisher.reconcile(target, holdings)
        newest_id = outcome.event_id if outcome is not None else (target.id if target else None)
        newest_at = target.created_at if target is not None and target.id == newest_id else None
        if newest_at is None and newest_id is not None:  # reconcile sent a newer save from the outbox
            entry = await asyncio.to_thread(publisher.outbox.get, newest_id)
            newest_at = entry.event.created_at if entry is not None else None
        unserved = await self._unserved(newest_id, holdings, outcome) if newest_id is not None else ()
        return ConsensusCheck(key, newest_id, newest_at, tuple(holdings), outcome, unserved)

    async def _unserved(self, newest_id: str, holdings: list[RelayHolding],
                        outcome: PublishOutcome | None) -> tuple[str, ...]:
        """Relays that said OK to the newest version but do not hold it: read it back from them by id."""
        publisher = self.publisher
        entry = await asyncio.to_thread(publisher.outbox.get, newest_id)
        acked = set(entry.accepted_by if entry is not None else ())
        if outcome is not None and outcome.event_id == newest_id:
            acked |= set(outcome.accepted_by)
        doubtful = acknowledged_not_shown(holdings, newest_id, acked)
        served = await publisher.served_by(newest_id, doubtful)
        return tuple(u for u in doubtful if u not in served)

    # --- stop ---------------------------------------------------------------------------------------
    async def stop(self, timeout: float) -> None:
        """Cancel the retry loop's helpers and consensus checks (the outbox keeps what is unsent); let the
        history thread finish what it was given."""
        self.stop_checks()
        await self.flush(min(timeout, self.store.dating.sign_ahead_max_s + 2))
        await self._tasks.cancel(timeout)
        await asyncio.to_thread(self._history_thread.shutdown, True)
