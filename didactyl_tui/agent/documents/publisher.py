"""Publishing document versions so that none is lost: outbox first, then the relays, then retries.

``DocumentPublisher.publish`` is the outbox-and-relays step of the one save path (:mod:`.saving`), for every
document alike. A background ``run()`` task retries what relays have not accepted, with backoff, and at
once when a relay (re)connects or the publisher starts (a restart picks up what the last run left
pending). ``relay_versions``/``reconcile`` find relays that hold an older version (or none) of a memory
and bring them up to date by republishing the newest.

Ordering: a version older than one this publisher already knows is never sent. ``publish`` notes the
newest version per address synchronously, before its first ``await``, and the retry loop checks that
note right before it hands an event to the pool, so a retry of an older version cannot overtake a
newer save on the same connection.

When the outbox file is locked by another process the edit is still sent: it is kept in memory (the
newest per address), retried from there, and written to the outbox as soon as the file is writable
again. ``outbox_error`` says what is wrong meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import AgentError
from ...nostr.event import Event
from ...nostr.replaceable import address_key, is_newer
from ...nostr.results import ConnectionState, Disposition, PublishOutcome
from .consensus import RelayHolding, holdings_of
from .outbox import SUPERSEDED, Outbox, OutboxEntry, backoff_delay

log = logging.getLogger("didactyl.memory")
_NEWER_KNOWN = "a newer version of this memory already exists; this one was not published"


class PoolLike(Protocol):
    @property
    def urls(self) -> list[str]: ...

    async def publish(
        self, event: Event, timeout: float = ..., *, urls: Iterable[str] | None = None
    ) -> PublishOutcome: ...

    async def query_by_relay(self, filters: list[dict[str, Any]], timeout: float = ...) -> dict[str, Any]: ...

    async def query_results(
        self, filters: list[dict[str, Any]], timeout: float = ..., *, urls: Iterable[str] | None = None
    ) -> dict[str, Any]: ...


@dataclass(slots=True)
class _Unsaved:
    """An event the outbox could not store (file locked): kept and retried in memory."""

    event: Event
    attempts: int = 0
    next_at: float = 0.0
    done: frozenset[str] = frozenset()  # relays that accepted or refused it for good
    held: bool = False  # some relay holds it: quitting now loses nothing


class DocumentPublisher:
    def __init__(
        self,
        pool: PoolLike,
        outbox: Outbox,
        *,
        timeout: float = 5.0,
        held_kinds: frozenset[int] = frozenset(),
        clock: Callable[[], float] = time.time,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
    ) -> None:
        self.pool = pool
        self.outbox = outbox
        self.timeout = timeout
        self._change_listeners: list[Callable[[], None]] = []
        self._clock = clock
        self._base = base_delay
        self._cap = max_delay
        self._wake = asyncio.Event()
        self._wake_all_requested = True  # a (re)started publisher retries everything at once
        self._retry_lock = asyncio.Lock()
        self._newest: dict[str, Event] = {}  # address -> newest version this publisher knows
        self._in_flight: set[str] = set()  # event ids a send is waiting on
        self._unsaved: dict[str, _Unsaved] = {}  # address -> newest event the outbox could not store
        self.outbox_error: str | None = None  # why the outbox is not writable right now
        # Kinds this run never retries or copies (the public relay list while the run's relays are an override: they
        # are not the agent's published relays). They wait in the outbox for a run without one.
        self.held_kinds = held_kinds

    def add_change_listener(self, cb: Callable[[], None]) -> None:
        """``cb()`` whenever the outbox changed (a save queued, a relay accepted, a retry failed, a write failed)."""
        self._change_listeners.append(cb)

    def _changed(self) -> None:
        for cb in list(self._change_listeners):
            try:
                cb()
            except Exception:  # a listener's bug must not stop publishing
                log.exception("outbox listener failed")

    def _note_newest(self, ev: Event) -> bool:
        """Remember ``ev`` as the newest of its address; False when a newer one is already known."""
        addr = address_key(ev)
        cur = self._newest.get(addr)
        if cur is not None and cur.id != ev.id and is_newer(cur, ev):
            return False
        self._newest[addr] = ev
        return True

    def _is_stale(self, ev: Event) -> bool:
        cur = self._newest.get(address_key(ev))
        return cur is not None and cur.id != ev.id and is_newer(cur, ev)

    def _outbox_failed(self, exc: AgentError) -> None:
        if self.outbox_error != exc.message:
            log.warning("memory outbox: %s", exc.message)
        self.outbox_error = exc.message
        self._changed()

    def _outbox_ok(self) -> None:
        if self.outbox_error is not None:
            self.outbox_error = None
            self._changed()

    # --- publishing -----------------------------------------------------------------------
    async def publish(self, ev: Event) -> PublishOutcome:
        """Write ``ev`` to the outbox, then send it to every relay; per-relay verdicts come back.

        If no relay accepts, the event stays pending and ``run()`` retries it. Raises
        :class:`AgentError` only when a newer version of the same memory is already known (``ev``
        must then never be sent).
        """
        if not self._note_newest(ev):
            raise AgentError(_NEWER_KNOWN, "Memory")
        addr = address_key(ev)
        # In flight from before it is queued: a retry must not find it due and send it beside this send.
        self._in_flight.add(ev.id)
        try:
            try:
                state = await asyncio.to_thread(self.outbox.enqueue, ev)
            except AgentError as exc:
                # The file is locked: sending now beats losing the edit; it is stored once writable.
                self._outbox_failed(exc)
                self._unsaved[addr] = _Unsaved(ev)
                state = None
            else:
                self._outbox_ok()
                if (old := self._unsaved.get(addr)) is not None and not is_newer(old.event, ev):
                    del self._unsaved[addr]
            if state == SUPERSEDED:
                if self._newest.get(addr) is ev:
                    del self._newest[addr]
                raise AgentError(_NEWER_KNOWN, "Memory")
            self._changed()
            return await self._send(ev)
        finally:
            self._in_flight.discard(ev.id)

    async def _send(self, ev: Event, urls: list[str] | None = None) -> PublishOutcome:
        # In flight until the verdicts are recorded: a retry reading the entry sooner resends to a relay that refused.
        self._in_flight.add(ev.id)
        try:
            outcome = await self.pool.publish(ev, timeout=self.timeout, urls=urls)
            unsaved = self._unsaved.get(address_key(ev))
            if unsaved is not None and unsaved.event.id == ev.id:
                self._fold_unsaved(unsaved, outcome)
            else:
                try:
                    await asyncio.to_thread(self.outbox.record, outcome)
                    self._outbox_ok()
                except AgentError as exc:
                    # Nothing lost: the entry stays due and the next retry sends it again
                    # (relays that already hold it answer "duplicate").
                    self._outbox_failed(exc)
        finally:
            self._in_flight.discard(ev.id)
        self._changed()
        self._wake.set()
        return outcome

    def _fold_unsaved(self, unsaved: _Unsaved, outcome: PublishOutcome) -> None:
        done = set(unsaved.done)
        for url, verdict in outcome.results.items():
            if verdict.disposition is not Disposition.RETRY:
                done.add(url)
            if verdict.disposition is Disposition.HELD:
                unsaved.held = True
        unsaved.done = frozenset(done)
        unsaved.attempts += 1
        unsaved.next_at = self._clock() + backoff_delay(unsaved.attempts - 1, base=self._base, cap=self._cap)

    # --- status ---------------------------------------------------------------------------
    def pending_count(self) -> int:
        """Events no relay has accepted yet (outbox entries plus any held in memory)."""
        try:
            stored = len(self.outbox.pending())
        except AgentError:
            stored = 0
        return stored + sum(1 for u in self._unsaved.values() if not u.done)

    def unsaved(self) -> list[Event]:
        """Events the outbox could not store yet (kept in memory, still retried)."""
        return [u.event for u in self._unsaved.values()]

    def unsaved_nowhere(self) -> list[Event]:
        """Events the outbox could not store that no relay holds either: lost if the process ends now."""
        return [u.event for u in self._unsaved.values() if not u.held]

    def entries(self, address: str | None = None) -> list[OutboxEntry]:
        return self.outbox.entries(address)

    # --- retrying -------------------------------------------------------------------------
    def wake(self) -> None:
        """Retry everything now (call when a relay (re)connects). Safe to call from callbacks."""
        self._wake_all_requested = True
        self._wake.set()

    def _on_relay_state(self, url: str, state: ConnectionState) -> None:
        if state is ConnectionState.CONNECTED:
            self.wake()

    async def _flush_unsaved(self) -> None:
        for addr, unsaved in list(self._unsaved.items()):
            ev = unsaved.event
            try:
                state = await asyncio.to_thread(self.outbox.enqueue, ev)
            except AgentError as exc:
                self._outbox_failed(exc)
                return
            self._outbox_ok()
            if self._unsaved.get(addr) is unsaved:
                del self._unsaved[addr]
            log.info("memory outbox writable again: stored %s (%s)", ev.id[:12], state)
            self._changed()

    async def _retry_unsaved(self) -> None:
        now = self._clock()
        urls = list(self.pool.urls)
        for unsaved in list(self._unsaved.values()):
            ev = unsaved.event
            todo = [u for u in urls if u not in unsaved.done]
            if not todo or unsaved.next_at > now or ev.id in self._in_flight or self._is_stale(ev):
                continue
            await self._send(ev, todo)

    async def retry_due(self) -> list[tuple[Event, PublishOutcome]]:
        """Send every entry whose retry time has come. Returns each sent, with its outcome."""
        async with self._retry_lock:
            now: float | None = None
            if self._wake_all_requested:
                try:
                    await asyncio.to_thread(self.outbox.wake_all)
                except AgentError as exc:  # cannot reschedule in the file: send everything anyway
                    self._outbox_failed(exc)
                    now = float("inf")
                self._wake_all_requested = False
            if self._unsaved:
                await self._flush_unsaved()
                await self._retry_unsaved()
            urls = list(self.pool.urls)
            due = await asyncio.to_thread(self.outbox.due, urls, now)
            tasks = []
            async with asyncio.TaskGroup() as tg:
                for entry in due:
                    if entry.event.id in self._in_flight:
                        continue  # publish() is sending it right now
                    tasks.append(tg.create_task(self._retry_entry(entry, urls)))
            return [sent for t in tasks if (sent := t.result()) is not None]

    async def _retry_entry(self, entry: OutboxEntry, urls: list[str]) -> tuple[Event, PublishOutcome] | None:
        # Re-check: a newer version may have superseded it since the due list was read.
        current = await asyncio.to_thread(self.outbox.get, entry.event.id)
        if current is None or current.state == SUPERSEDED:
            return None
        targets = current.relays_to_retry(urls) if entry.event.kind not in self.held_kinds else []
        # Checked with no await between it and the hand-over to the pool: see the module docstring.
        if not targets or self._is_stale(entry.event) or entry.event.id in self._in_flight:
            return None
        return entry.event, await self._send(entry.event, targets)

    async def run(self, *, max_sleep: float = 30.0) -> None:
        """Retry loop; runs until cancelled. Listens to the pool's connection states when it can."""
        add = getattr(self.pool, "add_state_listener", None)
        remove = getattr(self.pool, "remove_state_listener", None)
        if add is not None:
            add(self._on_relay_state)
        failures = 0
        with contextlib.suppress(AgentError):  # housekeeping only; a locked file can wait
            await asyncio.to_thread(self.outbox.prune)
        try:
            while True:
                self._wake.clear()
                try:
                    await self.retry_due()
                except AgentError as exc:  # e.g. the outbox file is unreadable: try again later
                    self._outbox_failed(exc)
                # While the outbox cannot be written, retries cannot be rescheduled in it: back off here.
                failures = failures + 1 if self.outbox_error is not None else 0
                sleep = await self._sleep_for(max_sleep, failures)
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
                # arrives as the wake event fires, and the loop would then never stop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(sleep):
                        await self._wake.wait()
        finally:
            if remove is not None:
                remove(self._on_relay_state)

    async def _sleep_for(self, max_sleep: float, failures: int) -> float:
        if failures:
            return min(max_sleep, backoff_delay(failures - 1, base=self._base, cap=self._cap))
        times: list[float] = []
        try:
            entries = await asyncio.to_thread(self.outbox.unfinished, self.pool.urls)
        except AgentError:
            entries = []
        # An entry being sent right now wakes the loop when its send ends (``_send`` sets the
        # event); counting its past due time here would spin the loop for the whole send.
        times.extend(
            e.next_attempt_at for e in entries if e.event.id not in self._in_flight and not self._is_stale(e.event)
        )
        times.extend(
            u.next_at for u in self._unsaved.values()
            if len(u.done) < len(self.pool.urls) and u.event.id not in self._in_flight
        )
        if not times:
            return max_sleep
        return max(0.0, min(max_sleep, min(times) - self._clock()))

    # --- relay consensus ------------------------------------------------------------------
    async def note_remote(self, ev: Event) -> list[str]:
        """A version seen on a relay (another device's save, or ours echoed): older local entries
        are superseded and never sent again. Returns the superseded entry ids."""
        self._note_newest(ev)
        addr = address_key(ev)
        if (old := self._unsaved.get(addr)) is not None and is_newer(ev, old.event):
            del self._unsaved[addr]
        try:
            gone = await asyncio.to_thread(self.outbox.mark_superseded_by, ev)
        except AgentError as exc:
            self._outbox_failed(exc)
            return []
        if gone:
            self._changed()
        return gone

    async def relay_versions(self, author: str, kind: int, d: str) -> tuple[Event | None, list[RelayHolding]]:
        """Ask every relay which version of (kind, author, d) it holds (``d`` "" for a replaceable kind)."""
        flt: dict[str, Any] = {"authors": [author], "kinds": [kind]}
        if d:
            flt["#d"] = [d]
        by_relay = await self.pool.query_by_relay([flt], timeout=self.timeout)
        return holdings_of(by_relay, self.pool.urls, author, kind, d)

    async def served_by(self, event_id: str, urls: Iterable[str]) -> set[str]:
        """Which of ``urls`` serve ``event_id`` when asked for it by id (delivery verified, not assumed)."""
        wanted = list(urls)
        if not wanted:
            return set()
        results = await self.pool.query_results([{"ids": [event_id]}], timeout=self.timeout, urls=wanted)
        return {url for url, r in results.items() if any(ev.id == event_id for ev in r.events)}

    async def reconcile(self, best: Event | None, holdings: Iterable[RelayHolding]) -> PublishOutcome | None:
        """Bring every reachable relay up to the newest version: ``best`` (from ``relay_versions``)
        or a newer local one still in the outbox. Older local entries are superseded. Relays that do
        not take it now stay marked in the outbox and ``run()`` keeps trying. Returns the outcome of
        the republish, or None when no reachable relay lags."""
        holdings = list(holdings)
        target = best
        if best is not None and target is not None:  # (both: the checker follows target, the newest so far)
            await self.note_remote(best)
            addr = address_key(best)
            local = await asyncio.to_thread(self.outbox.latest, addr)
            if local is not None and is_newer(local.event, best):
                target = local.event
            unsaved = self._unsaved.get(addr)
            if unsaved is not None and is_newer(unsaved.event, target):
                target = unsaved.event
        if target is None:
            return None
        lagging = [h.url for h in holdings if h.reachable and h.event_id != target.id]
        if not lagging:
            return None
        log.info("republishing %s to %d lagging relay(s)", target.id[:12], len(lagging))
        if self._is_stale(target):
            return None
        if address_key(target) not in self._unsaved or self._unsaved[address_key(target)].event.id != target.id:
            try:
                await asyncio.to_thread(self.outbox.require, target, lagging)
            except AgentError as exc:
                self._outbox_failed(exc)
        self._note_newest(target)
        return await self._send(target, lagging)
