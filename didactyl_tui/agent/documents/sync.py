"""Document sync: versions, bases and conflicts between this device, other writers and the relays — for every
document alike.

- Saving is not here: :meth:`~.saving.DocumentSaves.save` is THE path that publishes a document.
- Every version the store sees is kept in the history. A newer version built on this device's latest save is a
  later edit (adopted quietly); one edited from an older version is a concurrent edit: the lost-edit listeners are
  told (once), the edit stays in the history (see :mod:`didactyl_tui.agent.documents.lineage` and docs/sync.md).
- A version that cannot be used is recorded with the reason (``not used: …``); at start the newest version this
  device kept that reads is the document when the relays' newest does not (:meth:`restore_newest_known`).
- After start and after reconnects (rate-limited) each relay is asked which version of every document it holds,
  and lagging ones get the newest (:meth:`DocumentSync.check`).

The history is SQLite: every read and write of it runs on one worker thread, in order, never on the event loop
(:class:`~.history_thread.HistoryThread`, shared with the save pipeline). Trouble is reported through ``warn``,
never raised out of a background path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ...errors import AgentError
from ...nostr.event import Event
from ...nostr.replaceable import is_newer, newest_first
from ...nostr.results import ConnectionState, PublishOutcome
from ..background import BackgroundTasks
from .codec import DocumentError
from .consensus import ConsensusCheck, RelayHolding, acknowledged_not_shown
from .history import UNUSABLE_NOTE, DocumentVersion, usable_note
from .history_thread import HistoryThread
from .keys import DocumentKey
from .lineage import lost_local_edit
from .outbox import REFUSED as OUTBOX_REFUSED
from .outbox import Outbox
from .publisher import DocumentPublisher
from .store import DocumentStore
from .versions import VersionSeen

log = logging.getLogger("didactyl.documents.sync")

RECONCILE_MIN_INTERVAL_S = 10.0  # at most one relay-consensus check per this many seconds after reconnects
RECONCILE_START_DELAY_S = 1.0  # the first check waits for the outbox's first retries (and a CLI command's own)
RESTORE_CANDIDATES = 8  # versions from the history tried at start when the relays' newest does not read

class DocumentSync:
    def __init__(
        self,
        store: DocumentStore,
        publisher: DocumentPublisher,
        outbox: Outbox,
        history: HistoryThread,
        *,
        warn: Callable[[str], None],
        repairs: bool = True,
        not_repaired: frozenset[DocumentKey] = frozenset(),
    ) -> None:
        """``repairs``: False for read-only commands (no consensus check republishes to lagging relays);
        ``not_repaired``: documents never copied to a lagging relay (the public relay list while this run's relays
        are an override: copying it to them would publish it there)."""
        self.store, self.publisher, self.outbox, self.history = store, publisher, outbox, history
        self._warn = warn
        self._lost_listeners: list[Callable[[DocumentKey, str, str], None]] = []
        self._loop = asyncio.get_running_loop()
        self._tasks = BackgroundTasks()  # cancelled at stop, never waited for
        self._checking = False  # relay (re)connects trigger checks only once start-up is done (start_checks)
        self.reconcile_interval_s = RECONCILE_MIN_INTERVAL_S
        self.repairs = repairs
        self.not_repaired = not_repaired
        self._reconcile_lock = asyncio.Lock()
        self._reconcile_task: asyncio.Task[Any] | None = None
        self._reconcile_again = False
        self._last_reconcile = float("-inf")
        store.add_version_listener(self._version_seen)

    # --- the history ------------------------------------------------------------------------------
    async def versions(self, key: DocumentKey) -> list[DocumentVersion]:
        """This key's versions of document ``key``, newest first."""
        return await self.history.versions(key)

    async def annotate(self, event_id: str, note: str) -> None:
        await self.history.annotate(event_id, note)

    # --- every version seen ------------------------------------------------------------------------
    def _version_seen(self, seen: VersionSeen) -> None:
        """(Store listener, on the loop.) Judge and keep ``seen`` on the history thread, in arrival order."""
        judge = seen.origin != "local" and seen.became_current
        self.history.submit(self._judge_and_record, seen, judge)
        if seen.origin == "remote":
            self._tasks.spawn(self._note_remote(seen.event))

    def _judge_and_record(self, seen: VersionSeen, judge: bool) -> None:
        guarded, history = self.history.guarded, self.history.history
        lost = guarded(self._lost_local_edit, seen) if judge else None
        note = f"{UNUSABLE_NOTE}{seen.unusable}" if seen.unusable else ""
        guarded(history.record, seen.event, seen.origin, note)
        if seen.unusable:
            guarded(self._note_unusable, seen.event.id, note)
        if seen.origin == "remote" and not seen.unusable:
            guarded(history.mark_delivered, seen.event.id)  # a relay serves it: others can read it
        if lost is not None:
            self._loop.call_soon_threadsafe(self._tell_lost, seen.type, lost, seen.event.id)

    def _note_unusable(self, event_id: str, note: str) -> None:
        known = self.history.history.get(event_id)
        if known is not None and usable_note(known.note):  # seen before it was judged (e.g. as an older version)
            self.history.history.annotate(event_id, note)

    def _tell_lost(self, key: DocumentKey, lost_event_id: str, winner_id: str) -> None:
        self._warn(f"concurrent edit of the {key.title.lower()}: your version {lost_event_id[:8]} and another "
                   f"writer's version {winner_id[:8]} were both edited from an older version; theirs (newer) is now "
                   "in use and yours is kept in the history; to merge, open the merge view in the app, or print "
                   f"yours with `{key.command('show')} --version {lost_event_id[:8]}` and save the "
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
        return lost_local_edit(self.history.history, self.store.pubkey, seen.event, replaced, same_text)

    async def restore_newest_known(self) -> None:
        """The newest version this device knows — an edit the relays did not confirm before the last run ended, or
        a version the relays have since lost, or the last good one when the relays' newest does not read — is still
        the document: used (and sent by the retry loop or the consensus check) unless the relays gave something
        newer that reads."""
        await asyncio.gather(*(self._restore(key) for key in self.store.keys))

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

    async def check(self, key: DocumentKey, *, fix: bool) -> ConsensusCheck:
        """Ask every relay which version of ``key`` it holds; with ``fix``, lagging ones get the newest."""
        async with self._reconcile_lock:
            return await self._check(key, fix=fix)

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
        history thread finish what it was given (stop the save pipeline first: its last saves are kept there)."""
        self.stop_checks()
        await self._tasks.cancel(timeout)
        await self.history.stop()
