"""Direct messages to the agent (NIP-17): gift wraps addressed to it are opened, judged by the DM inbox, and
the admin's and allow-listed senders' messages answered through the same turn, tools and memory as the
terminal, in one DM session per counterpart.

- Every wrap goes through :meth:`DmInbox.receive` (its ledger is SQLite: on a worker thread). Strangers,
  duplicates and unreadable wraps are counted and logged (never their text), and never reach the model.
- One message is answered at a time, in arrival order; the queue is bounded (``[dm] max_queued``).
- The reply is wrapped to the sender and to the agent (its own copy: how a second instance learns the
  message was answered) and sent to the sender's kind 10050 relays, falling back to ours.
- The agent's own kind 10050 names the relays it reads, published at start when the relays' copy differs.
- :meth:`DmService.stop` lets the turn under way finish (bounded), then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from ..agent.dm_inbox import DmInbox, DmLedger, DmPolicy, Verdict
from ..agent.events import TurnFailed, TurnFinished
from ..agent.session_kind import SessionKind
from ..config import Config
from ..errors import DidactylError
from ..nostr.event import Event
from ..nostr.nip17 import (
    MAX_MESSAGE_BYTES,
    DirectMessage,
    build_dm_relay_list,
    delivery_relays,
    dm_relay_list_filter,
    dm_relays_of,
    gift_wrap_filter,
)
from ..nostr.nip19 import encode_npub
from ..nostr.nip59 import MAX_BACKDATE_SECONDS
from ..nostr.pool import PoolSubscription, RelayPool
from .chat import ChatService
from .events import DmSessionChanged, ServiceEvent
from .runtime import Runtime

log = logging.getLogger("didactyl.dm")

DM_LEDGER_DB = "dm-ledger.sqlite3"
LOOKBACK_S = MAX_BACKDATE_SECONDS + 3600  # NIP-59 backdates wraps up to two days: look a little further
CATCH_UP_ROUNDS = 8  # re-fetches after a full queue, while wraps keep being set aside
MAX_HANDLED_IDS = 20_000
CUT_MARK = "\n[…cut: the reply was longer than a direct message may be]"


def cut_to_bytes(text: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``text`` within ``limit`` UTF-8 bytes (marked when cut)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    room = limit - len(CUT_MARK.encode())
    return data[:room].decode("utf-8", "ignore") + CUT_MARK


class DmService:
    def __init__(self, rt: Runtime, config: Config, chat: ChatService, policy: DmPolicy, data_dir: Path,
                 clock: Callable[[], float], emit: Callable[[ServiceEvent], None],
                 warn: Callable[[str], None]) -> None:
        self._rt, self._config, self._chat, self._policy = rt, config, chat, policy
        self._data_dir, self._clock, self._emit, self._warn = data_dir, clock, emit, warn
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=config.dm.max_queued)
        self._inbox: DmInbox | None = None
        self._worker: asyncio.Task[None] | None = None
        self._sub: PoolSubscription | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False
        self.dropped = 0  # wraps refused because the queue was full (fetched again once it drains)
        self._catch_up_task: asyncio.Task[None] | None = None
        self._handled: dict[str, None] = {}  # wrap ids handled this run (bounded), so a catch-up skips them

    @property
    def counts(self) -> dict[str, int]:
        """Verdicts so far (answer, duplicate, stranger, own_copy, unreadable) and wraps set aside by a full
        queue (``dropped``: fetched again later)."""
        counts = dict(self._inbox.counts) if self._inbox is not None else {}
        if self.dropped:
            counts["dropped"] = self.dropped
        return counts

    async def start(self) -> None:
        ledger = await asyncio.to_thread(DmLedger, self._data_dir / DM_LEDGER_DB, clock=self._clock)
        self._rt.closers.callback(_quietly_close, ledger)
        self._inbox = DmInbox(self._rt.key, self._policy, ledger)
        self._worker = asyncio.create_task(self._work(), name="dm-inbox")
        since = int(self._clock()) - LOOKBACK_S
        self._sub = self._rt.pool.subscribe([gift_wrap_filter(self._rt.key.public_key_hex, since=since)],
                                            self._arrived)
        self._rt.daemons.spawn(self._publish_own_relay_list())

    async def stop(self, timeout: float) -> None:
        """No new message is taken; the one being answered finishes (within ``timeout``)."""
        self._stopping = True
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker

    # --- receiving -----------------------------------------------------------------------------------
    def _arrived(self, url: str, wrap: Event) -> None:
        if self._stopping:
            return
        try:
            self._queue.put_nowait(wrap)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                self._warn(f"direct messages arrive faster than they are answered: {self.dropped} set aside "
                           f"(at most {self._config.dm.max_queued} wait, [dm] max_queued); fetched again later")
            if self._catch_up_task is None or self._catch_up_task.done():
                self._catch_up_task = self._rt.daemons.spawn(self._catch_up())

    async def _catch_up(self) -> None:
        """Wraps set aside while the queue was full are still on the relays: once it drains, fetch them again
        and queue them, waiting for room this time (the ledger still answers each message once)."""
        me = self._rt.key.public_key_hex
        for _ in range(CATCH_UP_ROUNDS):
            dropped_before = self.dropped
            await self._queue.join()
            since = int(self._clock()) - LOOKBACK_S
            wraps = await self._rt.pool.query([gift_wrap_filter(me, since=since)], timeout=self._rt.timeout_s)
            for wrap in wraps:
                if self._stopping:
                    return
                if wrap.id not in self._handled:
                    await self._queue.put(wrap)
            if self.dropped == dropped_before:
                return

    async def _work(self) -> None:
        assert self._inbox is not None
        while True:
            wrap = await self._queue.get()
            if self._stopping:
                return
            self._idle.clear()
            try:
                if wrap.id in self._handled:  # a catch-up fetched one the live subscription also delivered
                    continue
                self._handled[wrap.id] = None
                if len(self._handled) > MAX_HANDLED_IDS:
                    del self._handled[next(iter(self._handled))]
                decision = await asyncio.to_thread(self._inbox.receive, wrap)
                log.info("dm %s: %s", decision.verdict.value, decision.reason)
                if decision.verdict is Verdict.ANSWER and decision.message is not None:
                    await self._answer_or_release(decision.message)
            except DidactylError as exc:
                self._warn(f"a direct message was not handled: {exc.message}")
            except Exception:  # one bad message must not stop the inbox
                log.exception("a direct message was not handled")
            finally:
                self._idle.set()
                self._queue.task_done()

    # --- answering -----------------------------------------------------------------------------------
    def name_of(self, pubkey: str) -> str:
        """How a counterpart is named: their profile name when cached (the admin's), else a short npub."""
        rt = self._rt
        if rt.admin_cache is not None and pubkey == rt.admin_cache.pubkey:
            name = rt.admin_cache.view().profile.get("name")
            # Text from the relays: one line, no control characters (it reaches logs, titles, notifications).
            name = "".join(ch for ch in " ".join(str(name).split()) if ch.isprintable())[:64] if name else ""
            if name.strip():
                return name
        return encode_npub(pubkey)[:16] + "…"

    async def _session_for(self, sender: str, name: str) -> str:
        assert self._inbox is not None
        ledger, conversations = self._inbox.ledger, self._rt.conversations
        session = await asyncio.to_thread(ledger.session_for, sender)
        if session is None or not await asyncio.to_thread(conversations.has_session, session):
            session = await asyncio.to_thread(conversations.new_session, f"DM: {name}")
            await asyncio.to_thread(ledger.bind_session, sender, session)
        return session

    async def _answer_or_release(self, dm: DirectMessage) -> None:
        """Answer; on any failure give the claim up, so a later delivery (or run) may answer it."""
        assert self._inbox is not None
        try:
            await self._answer(dm)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._inbox.failed, dm)
            raise

    async def _answer(self, dm: DirectMessage) -> None:
        assert self._inbox is not None
        name = self.name_of(dm.sender)
        session = await self._session_for(dm.sender, name)
        self._emit(DmSessionChanged(session, dm.sender, name))
        reply = ""
        async for event in self._chat.run_turn(session, dm.text, SessionKind.DM):
            if isinstance(event, TurnFinished):
                reply = event.reply
            elif isinstance(event, TurnFailed):
                self._warn(f"a direct message from {name} was not answered: {event.message}")
        sent = False
        if reply.strip():
            wraps = self._inbox.reply(dm, cut_to_bytes(reply), now=int(self._clock()))
            sent = await self._deliver(dm.sender, wraps)
        if sent:
            await asyncio.to_thread(self._inbox.answered, dm)
            log.info("dm answered: message %s… from %s", dm.id[:12], name)
        else:
            await asyncio.to_thread(self._inbox.failed, dm)
        self._emit(DmSessionChanged(session, dm.sender, name))

    async def _deliver(self, recipient: str, wraps: dict[str, Event]) -> bool:
        """The recipient's wrap to their DM relays (else ours); our own copy to ours. True when theirs landed."""
        pool, timeout = self._rt.pool, self._config.relays.timeout_s
        lists = [ev for ev in await pool.query([dm_relay_list_filter([recipient])], timeout=timeout)
                 if ev.pubkey == recipient]
        targets = delivery_relays(lists[0] if lists else None, pool.urls)
        ours = [u for u in targets if u in pool.urls]
        theirs = [u for u in targets if u not in pool.urls]
        accepted: list[str] = []
        async with asyncio.TaskGroup() as tg:
            mine = tg.create_task(pool.publish(wraps[self._rt.key.public_key_hex], timeout))
            if ours:
                accepted += (await pool.publish(wraps[recipient], timeout, urls=ours)).accepted_by
            if theirs:
                accepted += await self._publish_elsewhere(wraps[recipient], theirs)
        if not mine.result().any_accepted:
            log.info("dm: our own copy of a reply reached no relay")
        if not accepted:
            self._warn(f"no relay accepted the reply to {self.name_of(recipient)} (tried {', '.join(targets)})")
        return bool(accepted)

    async def _publish_elsewhere(self, wrap: Event, urls: list[str]) -> list[str]:
        """Relays we do not otherwise use: a short-lived pool, closed after the publish."""
        timeout = self._config.relays.timeout_s
        async with RelayPool(urls, auth_key=self._rt.key) as pool:
            await pool.wait_connected(timeout, all_relays=False)
            return (await pool.publish(wrap, timeout)).accepted_by

    async def _publish_own_relay_list(self) -> None:
        """Our kind 10050: where we read gift wraps (the relays in use), when the relays' copy differs. Not while
        ``$DIDACTYL_RELAYS`` overrides the relays: they are this run's, not where the agent reads from for good."""
        pool, timeout, key = self._rt.pool, self._config.relays.timeout_s, self._rt.key
        if not pool.urls or self._config.relays_override is not None:
            return
        current = [ev for ev in await pool.query([dm_relay_list_filter([key.public_key_hex])], timeout=timeout)
                   if ev.pubkey == key.public_key_hex]
        wanted = pool.urls[:8]
        if current and dm_relays_of(current[0]) == wanted:
            return
        created_at = max(int(self._clock()), current[0].created_at + 1 if current else 0)
        event = build_dm_relay_list(key, wanted, created_at=created_at)
        outcome = await pool.publish(event, timeout)
        if outcome.results and not outcome.any_accepted:
            self._warn(f"the agent's DM relay list was not published: {outcome.summary()}")


def _quietly_close(ledger: DmLedger) -> None:
    with contextlib.suppress(Exception):
        ledger.close()
