"""Delivering the reply wraps the DM ledger's outbox holds: each to the relays its recipient reads (their kind
10050, else ours), retried with backoff — across restarts, since the outbox is on disk — until a relay accepts
it (``OK true``, or ``duplicate:``) or ``give_up_after_s`` passes.

Every refusal is retried, ``blocked:`` included: the relay that refused may take the wrap later (an allow-list
that gains the recipient, a relay that comes back). Relays the agent does not use are reached through a
short-lived connection. The outcome of each attempt goes to ``on_outcome`` (the service logs it, and says
when a message was delivered or given up).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ...nostr.event import Event
from ...nostr.nip17 import dm_relay_list_filter, dm_relays_of
from ...nostr.results import ConnectionState, Disposition, PublishOutcome, RelayVerdict
from ...terminal_text import one_line
from ..documents.outbox import backoff_delay
from .ledger import DmLedger, PendingWrap, WrapOutcome

log = logging.getLogger("didactyl.dm")

ACCEPTED = "accepted"
MAX_PARALLEL_SENDS = 16  # wraps being sent at once
MAX_FOREIGN_RELAYS = 8  # NIP-17 asks for 1-3 DM relays; a longer list is cut (nip17.MAX_DM_RELAYS)
RELAY_LIST_TTL_S = 300.0  # a recipient's kind 10050 is asked for again after this
MAX_CACHED_LISTS = 1000
AUTHORS_PER_QUERY = 100
IDLE_CHECK_S = 30.0  # the longest sleep with nothing due (a wrap added elsewhere is seen within this)


class PoolLike(Protocol):
    @property
    def urls(self) -> list[str]: ...

    async def publish(self, event: Event, timeout: float = ..., *,
                      urls: Iterable[str] | None = None) -> PublishOutcome: ...

    async def query(self, filters: list[dict[str, Any]], timeout: float = ...) -> list[Event]: ...


OpenPool = Callable[[list[str]], contextlib.AbstractAsyncContextManager[Any]]


def relay_status(verdict: RelayVerdict) -> str:
    """``accepted`` when the relay holds the wrap, else one line saying why not (relay words cleaned)."""
    if verdict.disposition is Disposition.HELD:
        return ACCEPTED
    reason = one_line(verdict.message)[:200]
    return f"{verdict.verdict.value}{': ' + reason if reason else ''}"


class DmDelivery:
    def __init__(self, pool: PoolLike, ledger: DmLedger, *, open_pool: OpenPool, timeout: float,
                 give_up_after_s: float, retry_max_s: float, on_outcome: Callable[[WrapOutcome], None],
                 clock: Callable[[], float] = time.time, retry_base_s: float = 1.0) -> None:
        self._pool, self._ledger, self._open_pool = pool, ledger, open_pool
        self._timeout, self._give_up, self._retry_max, self._retry_base = timeout, give_up_after_s, retry_max_s, \
            retry_base_s
        self._on_outcome, self._clock = on_outcome, clock
        self._wake = asyncio.Event()
        self._wake_all = True  # a (re)started delivery tries everything at once
        self._lists: dict[str, tuple[float, list[str]]] = {}  # recipient -> (until, their DM relays)
        self._sending: set[str] = set()  # wrap ids an attempt is under way for
        self._attempts: set[asyncio.Task[None]] = set()  # each bounded by the relay timeouts
        self._room = asyncio.Semaphore(MAX_PARALLEL_SENDS)

    def wake(self) -> None:
        """Look for due wraps now (a reply was just written)."""
        self._wake.set()

    def relay_state_changed(self, url: str, state: ConnectionState) -> None:
        """A pool state listener: a relay that (re)connects gets every waiting wrap at once."""
        if state is ConnectionState.CONNECTED:
            self._wake_all = True
            self._wake.set()

    async def run(self) -> None:
        """Deliver until cancelled (the outbox keeps what is not delivered)."""
        while True:
            self._wake.clear()
            try:
                await self.deliver_due()
                next_at = await asyncio.to_thread(self._ledger.next_due)
            except Exception:  # a bad moment of the ledger must not end delivery
                log.exception("delivering direct-message replies failed; trying again later")
                next_at = None
            sleep = IDLE_CHECK_S if next_at is None else min(IDLE_CHECK_S, max(0.0, next_at - self._clock()))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sleep):
                    await self._wake.wait()

    async def deliver_due(self, *, wait: bool = False) -> int:
        """Start one attempt for every wrap due now, each on its own (a slow or dead relay holds only the wraps
        sent to it); with ``wait``, until they end. How many were started."""
        if self._wake_all:
            self._wake_all = False
            await asyncio.to_thread(self._ledger.wake_all)
        due = [w for w in await asyncio.to_thread(self._ledger.due) if w.wrap.id not in self._sending]
        if not due:
            return 0
        targets = await self.targets_for({w.recipient for w in due})
        started = []
        for pending in due:
            self._sending.add(pending.wrap.id)
            task = asyncio.create_task(self._attempt(pending, targets[pending.recipient]))
            self._attempts.add(task)
            task.add_done_callback(self._attempts.discard)
            started.append(task)
        if wait:
            await asyncio.wait(started)
        return len(started)

    async def close(self) -> None:
        """Cancel the attempts under way: what they did not finish stays due in the outbox."""
        attempts = list(self._attempts)
        for task in attempts:
            task.cancel()
        for task in attempts:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def targets_for(self, recipients: Iterable[str]) -> dict[str, list[str]]:
        """Where each recipient reads gift wraps: their kind 10050's relays, else ours (cached a while)."""
        now = self._clock()
        wanted = sorted(set(recipients))
        unknown = [pk for pk in wanted if self._lists.get(pk, (0.0, []))[0] <= now]
        for start in range(0, len(unknown), AUTHORS_PER_QUERY):
            chunk = unknown[start:start + AUTHORS_PER_QUERY]
            events = await self._pool.query([dm_relay_list_filter(chunk)], timeout=self._timeout)
            found = {ev.pubkey: dm_relays_of(ev) for ev in events}
            if len(self._lists) > MAX_CACHED_LISTS:
                self._lists.clear()
            for pk in chunk:
                self._lists[pk] = (now + RELAY_LIST_TTL_S, found.get(pk, []))
        ours = list(dict.fromkeys(self._pool.urls))
        return {pk: self._lists[pk][1][:MAX_FOREIGN_RELAYS] or ours for pk in wanted}

    async def _attempt(self, pending: PendingWrap, targets: list[str]) -> None:
        try:
            async with self._room:
                statuses = await self._send(pending.wrap, targets)
            delay = backoff_delay(pending.attempts, base=self._retry_base, cap=self._retry_max)
            outcome = await asyncio.to_thread(self._ledger.record_attempt, pending.wrap.id, statuses,
                                              next_attempt_at=self._clock() + delay,
                                              give_up_after_s=self._give_up)
            if outcome is not None:
                self._on_outcome(outcome)
        except Exception:  # this wrap stays due; the next attempt may fare better
            log.exception("a direct-message reply could not be sent")
        finally:
            self._sending.discard(pending.wrap.id)
            self._wake.set()  # the run loop works out its next wake-up again

    async def _send(self, wrap: Event, targets: list[str]) -> dict[str, str]:
        ours = [u for u in targets if u in self._pool.urls]
        theirs = [u for u in targets if u not in self._pool.urls]
        statuses: dict[str, str] = {}
        async with asyncio.TaskGroup() as tg:
            mine = tg.create_task(self._pool.publish(wrap, self._timeout, urls=ours)) if ours else None
            foreign = tg.create_task(self._publish_elsewhere(wrap, theirs)) if theirs else None
        if mine is not None:
            statuses.update({u: relay_status(v) for u, v in mine.result().results.items()})
        if foreign is not None:
            statuses.update(foreign.result())
        return statuses

    async def _publish_elsewhere(self, wrap: Event, urls: list[str]) -> dict[str, str]:
        """Relays we do not otherwise use: a short-lived connection, closed after the publish."""
        try:
            async with self._open_pool(urls) as pool:
                await pool.wait_connected(self._timeout, all_relays=False)
                outcome = await pool.publish(wrap, self._timeout)
        except Exception as exc:  # an unusable URL or socket: this attempt failed, the next may not
            return {u: f"not_connected: {one_line(str(exc))[:200]}" for u in urls}
        return {u: relay_status(v) for u, v in outcome.results.items()}

