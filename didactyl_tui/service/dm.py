"""Direct messages to the agent (NIP-17): gift wraps addressed to it are opened, judged by the DM inbox, and
the admin's and allow-listed senders' messages answered through the same turn and memory as the terminal, in
one DM session per conversation (its set of participants).

- One process per data dir answers (``dm.lock``): a second one (the app while ``serve`` runs) stands by and
  takes over when the first ends.
- Every wrap goes through :meth:`DmInbox.receive`. What is not answered (strangers, duplicates, unreadable or
  forged wraps, and those the relay client dropped for a bad id, signature or date) is counted by cause and
  logged once per cause with a running count (at most a line per minute each); never the text.
- Conversations are answered in parallel, up to ``[dm] max_parallel``; the messages of one conversation one
  at a time, in order. A slow turn holds only its own conversation.
- A reply is written (signed wraps in the ledger's outbox, the message ``written``) before any is sent, then
  delivered by :class:`DmDelivery`: a message counts as answered only once a relay its sender reads accepted
  the sender's wrap; until then it is retried, across restarts, and never answered again.
- Who may write, and what each turn may see and do, is decided when the message is judged and again when its turn
  starts, from the config as it is then (:class:`~.live_policy.LivePolicy`): the admin's own conversation has every
  tool and sees everything; any other (a guest, a group even with the admin in it) gets ``[dm] guest_tools`` and
  only what is for everyone (agent/audience.py). A sender no longer allowed by then is not answered.
- :meth:`DmService.stop` lets the turns under way finish (bounded), sends what they wrote, then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent.background import BackgroundTasks
from ..agent.conversations.session_kind import SessionKind
from ..agent.conversations.store import ConversationStore
from ..agent.dm.delivery import DmDelivery
from ..agent.dm.inbox import DmInbox, Verdict, cut_to_bytes, room_members
from ..agent.dm.ledger import DELIVERED, GIVEN_UP, WRAP_PENDING, DmLedger, WrapOutcome
from ..agent.dm.prompt_report import report_content
from ..agent.dm.signer import DmSigner
from ..agent.soul.prompt_record import PromptAssembly
from ..agent.turn.events import TurnFailed, TurnFinished, TurnStarted
from ..config import Config
from ..errors import DidactylError
from ..nostr.event import Event
from ..nostr.nip17 import DirectMessage, gift_wrap_filter
from ..nostr.nip59 import MAX_BACKDATE_SECONDS
from ..nostr.pool import PoolSubscription, RelayPool
from ..terminal_text import one_line
from .chat import ChatService
from .dm_answerer import AnswererLock
from .dm_pairing import DmPairing
from .dm_relay_list import publish_dm_relay_list
from .dm_status import DmStatus, DropLog, ParticipantNames
from .events import DmSessionChanged, ServiceEvent
from .identity_caches import IdentityCaches
from .live_policy import INBOX_RECHECK_S, GuestTools, LivePolicy

log = logging.getLogger("didactyl.dm")

DM_LEDGER_DB = "dm-ledger.sqlite3"
LOOKBACK_S = MAX_BACKDATE_SECONDS + 3600  # NIP-59 backdates wraps up to two days: look a little further
CATCH_UP_ROUNDS = 8  # re-fetches after a full queue, while wraps keep being set aside
MAX_HANDLED_IDS = 20_000
DROP_LOG_INTERVAL_S = 60.0  # at most one log line per cause of dropped wraps in this time
_RELAY_DROPS = {"invalid_sig": "bad signature", "invalid_id": "bad id", "future_created_at": "future timestamp",
                "bad_event": "malformed event", "filter_mismatch": "not asked for"}


@dataclass
class _Lane:
    """One conversation's messages waiting for their turn, oldest first (by date, then arrival)."""

    pending: list[tuple[int, int, DirectMessage]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class DmService:
    """Answers through the local ``chat``; wraps sealed and opened by ``signer``, carried by ``pool``; names from
    ``identities``, read each time (the admin's cache changes with [admin]); the ledger closed by ``closers``."""

    def __init__(self, chat: ChatService, *, signer: DmSigner, pool: RelayPool, conversations: ConversationStore,
                 identities: IdentityCaches, daemons: BackgroundTasks, closers: contextlib.AsyncExitStack,
                 timeout_s: float, config: Config, policy: LivePolicy, data_dir: Path, clock: Callable[[], float],
                 emit: Callable[[ServiceEvent], None], warn: Callable[[str], None]) -> None:
        self._chat, self._signer, self._pool, self._conversations = chat, signer, pool, conversations
        self._daemons, self._closers, self._timeout_s, self._config = daemons, closers, timeout_s, config
        self._policy, self._data_dir, self._clock, self._emit, self._warn = policy, data_dir, clock, emit, warn
        self._names = ParticipantNames(lambda: identities.admin)
        self._incoming: asyncio.Queue[Event] = asyncio.Queue(maxsize=config.dm.max_queued)
        self._room_for_messages = asyncio.Semaphore(config.dm.max_queued)
        self._turns = asyncio.Semaphore(config.dm.max_parallel)
        self._lanes: dict[str, _Lane] = {}
        self._arrival, self._answering = itertools.count(), 0
        self._inbox: DmInbox | None = None
        self._delivery: DmDelivery | None = None
        self._pairing: DmPairing | None = None  # invitations and refusals: answered without the model
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._sub: PoolSubscription | None = None
        self._answerer = AnswererLock(data_dir)
        self._standby, self._stopping = "", False
        self._drops = DropLog(DROP_LOG_INTERVAL_S)
        self.dropped = 0  # wraps set aside because the queue was full (fetched again once it drains)
        self._relay_drops = 0  # wraps the relay client dropped (bad id, signature, date) before the inbox saw them
        self._catch_up_task: asyncio.Task[None] | None = None
        self._handled: dict[str, None] = {}  # wrap ids handled this run (bounded), so a catch-up skips them
        self._guest_tools = GuestTools(chat.prompt.tool_names, warn)
        self._guest_tools.policy(policy.rights.guest_tools)  # said once at start when it names an unknown tool

    @property
    def counts(self) -> dict[str, int]:
        """Verdicts so far (answer, duplicate, stranger, own_copy, unreadable) and wraps set aside by a full
        queue (``dropped``: fetched again later)."""
        counts = dict(self._inbox.counts) if self._inbox is not None else {}
        if self._relay_drops:
            counts["unreadable"] = counts.get("unreadable", 0) + self._relay_drops
        if self.dropped:
            counts["dropped"] = self.dropped
        return counts

    @property
    def ledger(self) -> DmLedger | None:
        return self._inbox.ledger if self._inbox is not None else None

    async def status(self) -> DmStatus:
        ledger = self.ledger
        messages: dict[str, int] = {}
        undelivered, given_up = 0, []
        if ledger is not None:
            messages = await asyncio.to_thread(ledger.counts)
            undelivered = await asyncio.to_thread(ledger.waiting)
            given_up = [f"{self._names.name_of(r.sender) if r.sender else '?'}: {r.detail}"
                        for r in await asyncio.to_thread(ledger.given_up)]
        waiting = sum(len(lane.pending) for lane in self._lanes.values())
        return DmStatus(ledger is not None, self._standby, waiting, self._answering, undelivered, messages,
                        dict(self._drops.tally.counts), given_up)

    # --- lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        if await self._answerer.try_take():
            await self._begin()
            return
        self._standby = f"another didactyl answers them for this data dir{self._answerer.holder()}"
        log.info("direct messages: %s; this one takes over when it ends", self._standby)
        self._tasks["standby"] = asyncio.create_task(self._wait_for_turn(), name="dm-standby")

    async def _wait_for_turn(self) -> None:
        await self._answerer.wait_for_turn()
        self._standby = ""
        log.info("direct messages: taking over (the other answerer ended)")
        await self._begin()

    async def _begin(self) -> None:
        pool = self._pool
        # Retries, bounds and a message's date are judged by the real clock (as relays judge events); the
        # service's clock dates what we sign.
        ledger = await asyncio.to_thread(DmLedger, self._data_dir / DM_LEDGER_DB, clock=time.time)
        self._closers.callback(_quietly_close, ledger)
        self._inbox = DmInbox(self._signer, self._policy.dm, ledger, clock=time.time)
        dm = self._config.dm
        self._delivery = DmDelivery(pool, ledger, open_pool=self._open_pool, timeout=self._timeout_s,
                                    give_up_after_s=dm.give_up_after_s, retry_max_s=dm.retry_max_interval_s,
                                    on_outcome=self._delivered, clock=time.time)
        self._pairing = DmPairing(self._inbox, self._delivery, pool, self._policy, self._config, self._data_dir,
                                  self._clock, self._daemons.spawn)
        pool.add_state_listener(self._delivery.relay_state_changed)
        self._tasks["delivery"] = asyncio.create_task(self._delivery.run(), name="dm-delivery")
        self._tasks["receive"] = asyncio.create_task(self._receive(), name="dm-inbox")
        self._tasks["drop-log"] = asyncio.create_task(self._drops.run(), name="dm-drop-log")
        since = int(self._clock()) - LOOKBACK_S
        self._sub = pool.subscribe([gift_wrap_filter(self._signer.public_key_hex, since=since)], self._arrived,
                                      on_dropped=self._dropped_by_relay)
        self._daemons.spawn(publish_dm_relay_list(pool, self._signer, self._config, self._clock, self._warn))

    async def stop(self, timeout: float) -> None:
        """No new message is taken; the turns under way finish (within ``timeout``) and what they wrote is sent
        once more; what is still undelivered stays in the outbox for the next run."""
        self._stopping = True
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.close()
        for name in ("standby", "receive", "drop-log"):
            await _cancel(self._tasks.pop(name, None))
        lanes = [lane.task for lane in self._lanes.values() if lane.task is not None]
        if lanes:
            await asyncio.wait(lanes, timeout=timeout)
            for task in lanes:
                await _cancel(task)
        await _cancel(self._tasks.pop("delivery", None))
        if self._delivery is not None:
            self._pool.remove_state_listener(self._delivery.relay_state_changed)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2 * self._timeout_s + 1):
                    await self._delivery.deliver_due(wait=True)
            await self._delivery.close()
        self._drops.flush()
        self._answerer.release()

    # --- receiving -----------------------------------------------------------------------------------
    def _arrived(self, url: str, wrap: Event) -> None:
        if self._stopping:
            return
        try:
            self._incoming.put_nowait(wrap)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                self._warn(f"direct messages arrive faster than they are answered: {self.dropped} set aside "
                           f"(at most {self._config.dm.max_queued} wait, [dm] max_queued); fetched again later")
            if self._catch_up_task is None or self._catch_up_task.done():
                self._catch_up_task = self._daemons.spawn(self._catch_up())

    def _dropped_by_relay(self, url: str, reason: str) -> None:
        """The relay client dropped an event sent for the gift-wrap subscription (bad id, signature, date)."""
        self._relay_drops += 1
        self._drops.add("unreadable", _RELAY_DROPS.get(reason, reason), f"from {url}")

    async def _catch_up(self) -> None:
        """Wraps set aside while the queue was full are still on the relays: once it drains, fetch them again
        and queue them, waiting for room this time (the ledger still answers each message once)."""
        me = self._signer.public_key_hex
        for _ in range(CATCH_UP_ROUNDS):
            dropped_before = self.dropped
            await self._incoming.join()
            since = int(self._clock()) - LOOKBACK_S
            wraps = await self._pool.query([gift_wrap_filter(me, since=since)], timeout=self._timeout_s)
            for wrap in wraps:
                if self._stopping:
                    return
                if wrap.id not in self._handled:
                    await self._incoming.put(wrap)
            if self.dropped == dropped_before:
                return

    async def _receive(self) -> None:
        """Open and judge each wrap in arrival order; an answer goes to its conversation's lane."""
        assert self._inbox is not None
        while True:
            wrap = await self._incoming.get()
            try:
                if wrap.id in self._handled:  # a catch-up fetched one the live subscription also delivered
                    continue
                self._handled[wrap.id] = None
                if len(self._handled) > MAX_HANDLED_IDS:
                    del self._handled[next(iter(self._handled))]
                rights = await self._policy.refresh(max_age_s=INBOX_RECHECK_S)
                decision = await self._inbox.receive(wrap, rights.dm)
                if self._pairing is not None and await self._pairing.take(decision):  # an invitation: not the model's
                    continue
                if decision.verdict is Verdict.ANSWER and decision.message is not None:
                    await self._room_for_messages.acquire()
                    self._queue_answer(decision.message, decision.room)
                else:
                    self._drops.add(decision.verdict.value, decision.cause, decision.reason)
            except DidactylError as exc:
                self._warn(f"a direct message was not handled: {exc.message}")
            except Exception:  # one bad message must not stop the inbox
                log.exception("a direct message was not handled")
            finally:
                self._incoming.task_done()

    def _queue_answer(self, dm: DirectMessage, room: str) -> None:
        names = self._names
        log.info("dm answer: message %s… from %s in %s", dm.id[:12], names.name_of(dm.sender), names.room_name(room))
        lane = self._lanes.setdefault(room, _Lane())
        heapq.heappush(lane.pending, (dm.created_at, next(self._arrival), dm))
        if lane.task is None:
            lane.task = asyncio.create_task(self._run_lane(room, lane), name=f"dm-lane-{room[:12]}")

    async def _run_lane(self, room: str, lane: _Lane) -> None:
        """Answer one conversation's messages one at a time; the turn slots are shared by all conversations
        (a waiting conversation gets the next free one, in turn)."""
        try:
            while lane.pending and not self._stopping:
                _, _, dm = heapq.heappop(lane.pending)
                try:
                    async with self._turns:
                        await self._answer_or_release(dm, room)
                except DidactylError as exc:
                    self._warn(f"a direct message was not answered: {exc.message}")
                except Exception:
                    log.exception("a direct message was not answered")
                finally:
                    self._room_for_messages.release()
        finally:
            if self._lanes.get(room) is lane:
                del self._lanes[room]

    # --- answering -----------------------------------------------------------------------------------
    async def _session_for(self, room: str, subject: str | None) -> str:
        assert self._inbox is not None
        ledger, conversations = self._inbox.ledger, self._conversations
        session = await asyncio.to_thread(ledger.session_for, room)
        if session is None or not await asyncio.to_thread(conversations.has_session, session):
            title = f"DM: {self._names.room_name(room)}" + (f" · {one_line(subject)[:80]}" if subject else "")
            session = await asyncio.to_thread(conversations.new_session, title)
            await asyncio.to_thread(ledger.bind_session, room, session)
        return session

    async def _answer_or_release(self, dm: DirectMessage, room: str) -> None:
        """Answer; on a failure before the reply is written give the claim up, so a later run answers it."""
        assert self._inbox is not None
        inbox = self._inbox
        written = False
        try:
            written = await self._answer(dm, room)
        finally:
            if not written:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(inbox.ledger.release, dm.id, inbox.run_id)

    async def _answer(self, dm: DirectMessage, room: str) -> bool:
        assert self._inbox is not None and self._delivery is not None
        inbox = self._inbox
        rights = await self._policy.refresh()  # the config as it is now: a revoked admin is judged anew
        if not rights.dm.accepts(dm.sender):
            self._drops.add(Verdict.STRANGER.value, "no longer allowed", f"message {dm.id[:12]}… from "
                             f"{dm.sender[:12]}…: the config no longer allows its sender")
            return False
        if not await asyncio.to_thread(inbox.ledger.start_answering, dm.id, inbox.run_id):
            log.info("dm: message %s… was answered elsewhere meanwhile", dm.id[:12])
            return True  # not ours to release
        name, members = self._names.name_of(dm.sender), room_members(room)
        session = await self._session_for(room, dm.subject)
        self._emit(DmSessionChanged(session, dm.sender, name))
        audience = rights.dm.audience(room, self._names.room_name(room))
        admin_room = audience.admin
        kind = SessionKind.DM if admin_room else SessionKind.DM_GUEST
        text = dm.text if len(members) == 1 else f"{name}: {dm.text}"  # in a group, who is speaking
        reply, finished = "", None
        assembly: PromptAssembly | None = None
        self._answering += 1
        try:
            tools = None if admin_room else self._guest_tools.policy(rights.guest_tools)
            async for event in self._chat.run_turn(session, text, kind, tools=tools, audience=audience):
                if isinstance(event, TurnStarted):
                    assembly = event.assembly
                elif isinstance(event, TurnFinished):
                    reply, finished = event.reply, event
                elif isinstance(event, TurnFailed):
                    self._warn(f"a direct message from {name} was not answered: {event.message}")
        finally:
            self._answering -= 1
        if not reply.strip():
            log.info("dm not answered: message %s… from %s (the turn gave no reply); a later run tries again",
                     dm.id[:12], name)
            return False
        report = self._report(assembly, finished) if admin_room and len(members) == 1 else None
        wraps = await inbox.reply(dm, cut_to_bytes(reply), now=int(self._clock()), report=report)
        if not await asyncio.to_thread(inbox.ledger.write_reply, dm.id, inbox.run_id, wraps):
            log.info("dm: message %s… was answered elsewhere meanwhile; this reply is not sent", dm.id[:12])
            return True
        log.info("dm reply written: message %s… from %s (%d wraps)", dm.id[:12], name, len(wraps))
        self._delivery.wake()
        self._emit(DmSessionChanged(session, dm.sender, name))
        return True

    def _report(self, assembly: PromptAssembly | None, turn: TurnFinished | None) -> str | None:
        """The turn's prompt report for the admin (``[dm] prompt_report``): its prompt, usage and tool calls; None
        when off or it cannot be made (the reply goes without it: ``attach`` then says the assembly is not
        available)."""
        if assembly is None or not self._config.dm.prompt_report:
            return None
        try:
            return report_content(assembly, turn.usage if turn else None, tool_calls=turn.tool_calls if turn else ())
        except DidactylError as exc:
            log.warning("dm: the prompt report was not sent: %s", exc.message)
            return None

    def _delivered(self, outcome: WrapOutcome) -> None:
        """One delivery attempt's outcome (DmDelivery calls this)."""
        who = self._names.name_of(outcome.recipient)
        if outcome.message_state == DELIVERED:
            log.info("dm answered: message %s…, delivered to %s via %s", outcome.rumor_id[:12], who, outcome.detail)
        elif outcome.message_state == GIVEN_UP:
            self._warn(f"a reply to {who} was given up: {outcome.detail}")
            log.warning("dm gave up: message %s… to %s: %s", outcome.rumor_id[:12], who, outcome.detail)
        elif outcome.state == WRAP_PENDING and outcome.attempts & (outcome.attempts - 1) == 0:
            role = "sender" if outcome.for_sender else "member or own copy"
            log.info("dm not delivered yet: message %s… to %s (%s), attempt %d: %s", outcome.rumor_id[:12], who,
                     role, outcome.attempts, outcome.detail)

    def _open_pool(self, urls: list[str]) -> contextlib.AbstractAsyncContextManager[Any]:
        return RelayPool(urls[:8], auth_key=self._signer.relay_auth_key)


async def _cancel(task: asyncio.Task[Any] | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _quietly_close(ledger: DmLedger) -> None:
    with contextlib.suppress(Exception):
        ledger.close()
