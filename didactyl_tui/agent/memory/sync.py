"""Memory sync: versions, bases and conflicts between this device, other devices and the relays.

- :meth:`MemorySync.save` is THE path that publishes a memory: the ``memory_save`` tool, the editor, the CLI
  and rollback all call it. A save refused because another device's newer version is known is noted in the
  history and the newer version is fetched, whoever saved.
- Every version the store sees is kept in the history. A newer version built on this device's latest save
  is a later edit (adopted quietly); one edited from an older version is a concurrent edit: ``on_lost`` is
  told (once), the edit stays in the history (see :mod:`.lineage` and docs/sync.md).
- A burst of saves (the clock would not allow a date after the last one without signing ahead of it) is
  coalesced when the caller does not wait: the newest text is kept and signed as soon as the clock allows.
- After start and after reconnects (rate-limited) each relay is asked which version it holds and lagging ones
  get the newest (:meth:`MemorySync.check`).

The history is SQLite: every read and write of it runs on one worker thread, in order, never on the event
loop. Trouble is reported through ``warn``, never raised out of a background path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from ...errors import AgentError, NostrError
from ...nostr.event import Event
from ...nostr.kinds import APP_DATA
from ...nostr.replaceable import is_newer, newest_first
from ...nostr.results import ConnectionState, PublishOutcome
from ..background import BackgroundTasks
from .history import MemoryHistory, MemoryVersion
from .lineage import LOST_NOTE, lost_local_edit  # noqa: F401  (LOST_NOTE re-exported: it was defined here)
from .outbox import REFUSED as OUTBOX_REFUSED
from .outbox import Outbox
from .publisher import MemoryPublisher, RelayHolding
from .store import BURST_WAIT_MAX_S, DatedAheadError, MemoryStore, MemoryType, SaveResult, VersionSeen

log = logging.getLogger("didactyl.memory.sync")

RECONCILE_MIN_INTERVAL_S = 10.0  # at most one relay-consensus check per this many seconds after reconnects
RECONCILE_START_DELAY_S = 1.0  # the first check waits for the outbox's first retries (and a CLI command's own)
UNREADABLE_NOTE = "does not decrypt with this key"
RESTORE_CANDIDATES = 8  # versions from the history tried at start when the relays' newest does not decrypt
REFUSED_NOTE = "not published: a newer version from another device already existed"

R = TypeVar("R")


class NewerVersionKnown(AgentError):
    """A save was refused: another device's newer version is known (nothing published, the text kept)."""


@dataclass(frozen=True, slots=True)
class ConsensusCheck:
    """Which version of one memory each relay holds, and what bringing the lagging ones up to date gave."""

    type: MemoryType
    newest_event_id: str | None
    newest_created_at: int | None
    holdings: tuple[RelayHolding, ...]
    outcome: PublishOutcome | None
    # Relays that acknowledged the newest version (OK true) but do not serve it when asked by id.
    unserved: tuple[str, ...] = ()


class MemorySync:
    def __init__(
        self,
        store: MemoryStore,
        publisher: MemoryPublisher,
        outbox: Outbox,
        history: MemoryHistory,
        *,
        warn: Callable[[str], None],
        on_lost: Callable[[MemoryType, str, str], None],
    ) -> None:
        self.store, self.publisher, self.outbox, self.history = store, publisher, outbox, history
        self._warn, self._on_lost = warn, on_lost
        self._loop = asyncio.get_running_loop()
        self._history_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-history")
        self._history_error: str | None = None
        self._last_local: dict[MemoryType, str] = {}  # type -> the last version saved here
        # type -> (the newest text of a burst, not signed yet; the version it was written on)
        self._deferred: dict[MemoryType, tuple[str, str | None]] = {}
        self._flushers: dict[MemoryType, asyncio.Task[Any]] = {}
        self._tasks = BackgroundTasks()  # cancelled at stop, never waited for
        self.ready = False  # relay (re)connects trigger checks only once start-up is done
        self.reconcile_interval_s = RECONCILE_MIN_INTERVAL_S
        self.repairs = True  # False for read-only commands: no consensus check republishes to lagging relays
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
                self._loop.call_soon_threadsafe(self._warn, f"memory history: {message}")
            self._history_error = message
            return None
        self._history_error = None
        return result

    async def _history(self, fn: Callable[..., R], *args: Any) -> R | None:
        return await self._loop.run_in_executor(self._history_thread, self._guarded, fn, *args)

    def _history_later(self, fn: Callable[..., Any], *args: Any) -> None:
        self._history_thread.submit(self._guarded, fn, *args)

    async def versions(self, t: MemoryType) -> list[MemoryVersion]:
        """This key's versions of memory ``t``, newest first."""
        return await self._history(self.history.versions, t.d_tag, self.store.pubkey) or []

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
        note = UNREADABLE_NOTE if seen.unreadable else ""
        self._guarded(self.history.record, seen.event, seen.origin, note)
        if seen.origin == "remote" and not seen.unreadable:
            self._guarded(self.history.mark_delivered, seen.event.id)  # a relay serves it: others can read it
        if lost is not None:
            self._loop.call_soon_threadsafe(self._tell_lost, seen.type, lost, seen.event.id)

    def _tell_lost(self, t: MemoryType, lost_event_id: str, winner_id: str) -> None:
        self._warn(f"concurrent edit of the {t.title.lower()}: your version {lost_event_id[:8]} and another "
                   f"device's version {winner_id[:8]} were both edited from an older version; theirs (newer) is "
                   "now the memory and yours is kept in the memory history; to merge, open the merge view in the "
                   f"app, or print yours with `didactyl memory show --type {t.value} --version {lost_event_id[:8]}` "
                   "and save the merged text")
        self._on_lost(t, lost_event_id, winner_id)

    async def _note_remote(self, ev: Event) -> None:
        try:
            await self.publisher.note_remote(ev)
        except Exception:  # the outbox reports its own trouble through on_change
            log.exception("noting a remote memory version failed")

    def _lost_local_edit(self, seen: VersionSeen) -> str | None:
        """(On the history thread.) The id of this device's latest save when ``seen`` (a newer version that
        replaced it) is a concurrent edit — annotated as lost; None for a later edit, or nothing of ours."""
        def same_text(ours: Event) -> bool:
            try:
                return self.store.decrypt(ours) == seen.content
            except NostrError:
                return True  # ours does not read: nothing to merge
        replaced = seen.replaced.id if seen.replaced is not None else None
        return lost_local_edit(self.history, self.store.pubkey, seen.event, replaced, same_text)

    async def restore_newest_known(self) -> None:
        """The newest version this device knows — an edit the relays did not confirm before the last run
        ended, or a version the relays have since lost — is still the memory: shown (and sent by the retry
        loop or the consensus check) unless the relays gave something newer."""
        for t in MemoryType:
            candidates: list[tuple[Event, str]] = []
            try:
                entry = await asyncio.to_thread(self.outbox.latest, f"{APP_DATA}:{self.store.pubkey}:{t.d_tag}")
            except AgentError:
                entry = None
            if entry is not None and entry.state != OUTBOX_REFUSED:
                candidates.append((entry.event, "local"))
            # The newest versions kept here that decrypt (an unreadable newer one never blanks the memory).
            kept = [v for v in (await self.versions(t))[:RESTORE_CANDIDATES]
                    if UNREADABLE_NOTE not in v.note and not v.note.startswith("not published")]
            candidates += [(v.event, v.origin) for v in kept]
            for ev, origin in sorted(candidates, key=lambda pair: newest_first(pair[0])):
                if self.store.restore(ev, origin=origin):
                    break

    # --- the one save path --------------------------------------------------------------------------
    async def save(self, t: MemoryType | str, content: str, *, wait: bool = True) -> SaveResult:
        """Publish a new version of memory ``t``. Bad input raises AgentError before anything is published;
        a newer version from another device raises :class:`NewerVersionKnown` (nothing published, the text
        kept in the history, the newer version fetched).

        In a burst of saves the next date would be more than the allowed seconds ahead of the clock: with
        ``wait`` the save waits (briefly) for the clock; without it (the agent's tool) the text is kept and
        shown at once, and the newest text of the burst is signed and sent as soon as the clock allows
        (``SaveResult.deferred``)."""
        t = MemoryType.parse(t)
        content = self.store.validate(t, content)
        delay = self.store.sign_delay(t)
        # Only a burst is coalesced: a version dated far ahead (a fast clock elsewhere) is refused now, below.
        if not wait and (t in self._deferred or 0 < delay <= BURST_WAIT_MAX_S):
            return self._defer(t, content)
        self._deferred.pop(t, None)  # this newer text supersedes a burst's text not signed yet
        return await self._save_now(t, content)

    async def save_coalescing(self, t: MemoryType | str, content: str) -> SaveResult:
        """The agent's ``memory_save``: never waits for the clock (a burst is coalesced)."""
        return await self.save(t, content, wait=False)

    async def _save_now(self, t: MemoryType, content: str, base: str | None = None) -> SaveResult:
        before = self._last_local.get(t)
        try:
            result = await self.store.save(t, content, base=base)
        except DatedAheadError as exc:
            if exc.kept_event_id:
                await self.annotate(exc.kept_event_id, f"not published: {exc.message}")
            raise NewerVersionKnown(f"the {t.title.lower()} was not saved: {exc.message}; your text is kept in "
                                    "the memory history", "Memory") from None
        except AgentError as exc:
            refused = self._last_local.pop(t, None)
            if before is not None:
                self._last_local[t] = before
            if refused is not None and refused != before:
                await self.annotate(refused, REFUSED_NOTE)
            self._tasks.spawn(self.store.load([t]))  # fetch the newer version the publisher knows of
            raise NewerVersionKnown(f"the {t.title.lower()} was not saved: {exc.message}; your text is kept in "
                                    "the memory history", "Memory") from None
        if result.any_accepted:
            await self._history(self.history.mark_delivered, result.event_id)
        return result

    def _defer(self, t: MemoryType, content: str) -> SaveResult:
        # Its base is the version held when the first text of the burst was given (a version arriving
        # meanwhile was not seen by the writer: the flushed save must not claim it as its base).
        held = self.store.current_event(t)
        base = self._deferred[t][1] if t in self._deferred else (held.id if held else None)
        self._deferred[t] = (content, base)
        self.store.show_deferred(t, content)
        task = self._flushers.get(t)
        if task is None or task.done():
            self._flushers[t] = self._tasks.spawn(self._flush_deferred(t))
        return SaveResult(t, "", PublishOutcome("", {}), 0, self.store.snapshot(t), deferred=True)

    async def _flush_deferred(self, t: MemoryType) -> None:
        """Sign and send the newest text of a burst as soon as the clock allows (no date ahead of it)."""
        while t in self._deferred:
            await asyncio.sleep(min(max(self.store.sign_delay(t), 0.05), 1.0))
            if 0 < self.store.sign_delay(t) <= BURST_WAIT_MAX_S:
                continue  # (further ahead: a version from a fast clock arrived; the save below is refused)
            deferred = self._deferred.pop(t, None)
            if deferred is None:
                return
            try:
                await self._save_now(t, *deferred)
            except AgentError as exc:
                self._warn(exc.message)

    async def flush(self, timeout: float) -> None:
        """Send what a burst left unsigned (at stop): waits for the clock, at most ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                for t in list(self._deferred):
                    deferred = self._deferred.pop(t, None)
                    if deferred is not None:
                        with contextlib.suppress(AgentError):
                            await self._save_now(t, *deferred)

    # --- relay consensus ----------------------------------------------------------------------------
    def relay_state_changed(self, url: str, state: ConnectionState) -> None:
        if state is not ConnectionState.CONNECTED or not self.ready:
            return
        self.publisher.wake()  # retry what this relay missed now, not at the next backoff
        self.schedule_reconcile()

    def schedule_reconcile(self, delay: float = 0.0) -> None:
        """Check every relay's memory versions soon: at most once per ``reconcile_interval_s``."""
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
            for t in MemoryType:
                try:
                    check = await self.check(t, fix=True)
                except asyncio.CancelledError:
                    raise
                except Exception:  # relay trouble shows in the relay states; never out of a background check
                    log.exception("checking the relays' %s failed", t.value)
                    continue
                if check.outcome is not None and check.outcome.accepted_by:
                    log.info("brought %s up to date on %s", t.value, ", ".join(check.outcome.accepted_by))
            if not self._reconcile_again:
                return

    async def check(self, t: MemoryType, *, fix: bool) -> ConsensusCheck:
        """Ask every relay which version of memory ``t`` it holds; with ``fix``, lagging ones get the newest."""
        async with self._reconcile_lock:
            return await self._check(t, fix=fix)

    async def _check(self, t: MemoryType, *, fix: bool) -> ConsensusCheck:
        store, publisher = self.store, self.publisher
        # Whatever the outbox has due goes out first, so what the relays hold is looked at settled, not
        # mid-flight (finishing a save already waiting is not a new write: done with or without ``fix``).
        await publisher.retry_due()
        best, holdings = await publisher.relay_versions(store.pubkey, APP_DATA, t.d_tag)
        holdings = list(holdings)
        if best is not None and store.version_type(best) is t:  # (refused ones were counted when first seen)
            for h in holdings:
                if h.event_id == best.id:
                    store.ingest(h.url, best)  # a newer version than the cache's: adopted (and kept in history)
        # The newest the store accepts: a relay's (now in the cache) or this device's own newer save.
        target = store.current_event(t)
        outcome: PublishOutcome | None = None
        # A newer version the store refused (dated too far ahead, or not decryptable) is not overwritten.
        if fix and target is not None and (best is None or not is_newer(best, target)):
            outcome = await publisher.reconcile(target, holdings)
        newest_id = outcome.event_id if outcome is not None else (target.id if target else None)
        newest_at = target.created_at if target is not None and target.id == newest_id else None
        if newest_at is None and newest_id is not None:  # reconcile sent a newer save from the outbox
            entry = await asyncio.to_thread(publisher.outbox.get, newest_id)
            newest_at = entry.event.created_at if entry is not None else None
        unserved = await self._unserved(newest_id, holdings, outcome) if newest_id is not None else ()
        return ConsensusCheck(t, newest_id, newest_at, tuple(holdings), outcome, unserved)

    async def _unserved(self, newest_id: str, holdings: list[RelayHolding],
                        outcome: PublishOutcome | None) -> tuple[str, ...]:
        """Relays that said OK to the newest version but do not hold it: read it back from them by id."""
        publisher = self.publisher
        entry = await asyncio.to_thread(publisher.outbox.get, newest_id)
        acked = set(entry.accepted_by if entry is not None else ())
        if outcome is not None and outcome.event_id == newest_id:
            acked |= set(outcome.accepted_by)
        showing = {h.url for h in holdings if h.event_id == newest_id}
        doubtful = [h.url for h in holdings if h.reachable and h.url in acked and h.url not in showing]
        served = await publisher.served_by(newest_id, doubtful)
        return tuple(u for u in doubtful if u not in served)

    # --- stop ---------------------------------------------------------------------------------------
    async def stop(self, timeout: float) -> None:
        """Cancel the retry loop's helpers and consensus checks (the outbox keeps what is unsent); let the
        history thread finish what it was given."""
        self.ready = False
        await self.flush(min(timeout, self.store.sign_ahead_max_s + 2))
        await self._tasks.cancel(timeout)
        await asyncio.to_thread(self._history_thread.shutdown, True)
