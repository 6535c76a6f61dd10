"""The chat when the agent runs elsewhere (``didactyl attach``): a turn is a NIP-17 message to the agent and its
reply, and the inspector's entry is the agent's prompt report for that reply (or "not available").

One conversation per agent (its DM session with the admin), kept in this data dir and filled from the relays: at
start, up to ``[attach] history`` past messages between the admin and the agent; then each message as it comes,
whoever wrote it (a late reply, the admin on another device). A message is added once (its rumor id is kept in
``attach.sqlite3``). It is one of the two :class:`~.conversation.Conversation` parts (chat.py is the other); what
needs the agent here (its prompt, the merge view's model draft) the service does not offer while attached.

Never into the void: a message goes only to the relays the agent reads (attach_send.py). One none of them took within
``[attach] send_timeout_s`` ends its turn "not delivered" with their answers, and waits in ``attach-outbox.sqlite3``
(agent/dm/undelivered.py): sent as written whenever a relay of the agent's connects (at start too), or when the same
words are sent again (Retry), so the agent gets it, and answers it, once. With ``--invite`` the invitation is
presented at start (attached_pairing.py) and the first message waits for the agent's answer to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ..agent.audience import ADMIN_TURN, TurnAudience
from ..agent.conversations.seen_messages import SeenMessages
from ..agent.conversations.session_kind import SessionKind
from ..agent.dm.invitation import Outcome
from ..agent.dm.prompt_report import RemoteReport
from ..agent.dm.report_tool_calls import conversation_messages
from ..agent.dm.undelivered import Outgoing, Undelivered
from ..agent.tools.registry import ToolPolicy
from ..agent.turn.events import (
    AgentEvent,
    TextDelta,
    ToolCallStarted,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)
from ..config_remote import AttachConfig
from ..errors import DidactylError
from ..nostr.nip19 import encode_npub
from ..nostr.paging import PageBounds
from ..nostr.pool import PoolSubscription, RelayPool
from ..nostr.results import ConnectionState
from .attach import AttachTarget
from .attach_inbox import wrap_opener
from .attach_link import AttachLink, LinkBounds, LinkMessage
from .attach_reports import ReplyPrompts
from .attach_send import AgentPost, AlreadyDelivered, Delivery
from .attached_pairing import present_invitation
from .events import AttachedDelivered, AttachedMessage, AttachedToolCalls, ServiceEvent, ServiceWarning
from .sessions import SEEN_DB, Sessions

log = logging.getLogger("didactyl.attach")

UNDELIVERED_DB = "attach-outbox.sqlite3"
PAIRING_SENDS = 3  # the agent's answer to an invitation is waited for this many [attach] send_timeout_s


class AttachedChat:
    """The :class:`~.conversation.Conversation` part when the agent runs elsewhere."""

    def __init__(self, settings: AttachConfig, *, target: AttachTarget, sessions: Sessions, pool: RelayPool,
                 own_relay: Callable[[], str | None], relay_timeout_s: float, data_dir: Path,
                 closers: contextlib.AsyncExitStack, clock: Callable[[], float], emit: Callable[[ServiceEvent], None],
                 warn: Callable[[str], None]) -> None:
        """``own_relay``: this app's embedded relay's address as it is now (never the agent's); ``closers``: the
        runtime's, which closes the attach databases after the chat has stopped."""
        self._settings, self.sessions, self._pool, self._closers = settings, sessions, pool, closers
        self._emit, self._warn = emit, warn
        self.target = target
        self._data_dir = data_dir
        attach = settings
        bounds = LinkBounds(PageBounds(max_pages=attach.history_max_pages, max_bytes=attach.history_max_bytes,
                                       timeout_s=attach.history_timeout_s),
                            max_waiting=attach.max_waiting, max_waiting_bytes=attach.max_waiting_bytes)
        self.link = AttachLink(pool, target.admin, target.agent, timeout_s=relay_timeout_s,
                               on_message=self._arrived, clock=clock, bounds=bounds,
                               opener=wrap_opener(target.admin, target.agent, target.admin_key))
        self.prompts = ReplyPrompts(self.link, target.agent, report_wait_s=attach.report_wait_s, clock=clock,
                                    emit=emit, keep=sessions.keep_assembly)
        # This app's own relay is never the agent's: a loopback address in the agent's list names another machine's.
        # Asked at each use: the embedded relay may come back on another port while the app runs.
        self.post = AgentPost(pool, target.admin, target.agent, target.relays.urls,
                              timeout_s=relay_timeout_s, send_timeout_s=attach.send_timeout_s, clock=clock,
                              never=lambda: [url] if (url := own_relay()) else [])
        self._seen: SeenMessages | None = None
        self._undelivered: Undelivered | None = None
        self.session_id = ""
        self._pending: set[asyncio.Task[None]] = set()
        self._agent_reports = True  # the agent sent a report for its last reply (or none was asked yet)
        self._adding = asyncio.Lock()  # one message added at a time: the conversation keeps its order
        self._wake = asyncio.Event()  # a relay of the agent's connected: what waits is sent
        self._pairing: asyncio.Task[None] | None = None
        self._lists: PoolSubscription | None = None
        self._sending = asyncio.Lock()  # a retry and the redelivery never race: each message goes once
        self._late: dict[tuple[str, str], str] = {}  # (session, words) delivered late, no reply yet -> rumor id
        self._told_blocked = False

    @property
    def agent_npub(self) -> str:
        return encode_npub(self.target.agent)

    # --- lifecycle -----------------------------------------------------------------------------------
    @property
    def _pairing_wait_s(self) -> float:
        return PAIRING_SENDS * self._settings.send_timeout_s

    @property
    def agent_relays(self) -> list[str] | None:
        """Where the agent reads its direct messages (where this window sends, and reads its replies)."""
        return list(self.post.relays)

    async def start(self) -> None:
        """The conversation with the agent: found (or made), filled with what the relays hold, then followed; what an
        earlier run could not deliver is sent; an invitation is presented."""
        self._seen = seen = await asyncio.to_thread(SeenMessages, self._data_dir / SEEN_DB)
        self._closers.callback(seen.close)
        self._undelivered = waiting = await asyncio.to_thread(
            Undelivered, self._data_dir / UNDELIVERED_DB, max_waiting=self._settings.max_undelivered)
        self._closers.callback(waiting.close)
        self.session_id = await asyncio.to_thread(self._conversation, seen)
        await self.link.start()
        if not self.post.relays:  # none found before the relays were up: once more, through them
            with contextlib.suppress(DidactylError):
                await self.post.refresh()
        self._say_where()
        paired_before = False
        for message in await self.link.history(self._settings.history):
            await self._add(message, announce=False)
            paired_before |= message.pairing in (Outcome.PAIRED, Outcome.ALREADY_PAIRED)
        await self._send_waiting(announce=False)  # before the view shows the conversation: in it, in order
        self._pool.add_state_listener(self._relay_state)
        self._lists = self.post.follow(self._wake.set)  # the agent's list, published or changed while attached
        self._spawn(self._send_waiting_on_connect(), "attach-undelivered")
        if self.target.invitation and not paired_before:
            self._pairing = self._spawn(present_invitation(self.post, self.link, self.target, add=self._add,
                                                           warn=self._tell, wait_s=self._pairing_wait_s),
                                        "attach-pairing")
        if self.link.history_cut:
            bound = {"pages": "history_max_pages", "bytes": "history_max_bytes", "time": "history_timeout_s"}
            self._warn(f"the conversation with the agent was read from the relays only in part: the read reached "
                       f"[attach] {bound[self.link.history_cut]} before the newest {self._settings.history} "
                       "messages were certain (many gift wraps for you: a flood?)")

    def _conversation(self, seen: SeenMessages) -> str:
        """The conversation with this agent: the one marked with its key, or the one attach.sqlite3 bound to it
        before conversations knew their agent (then marked), or a new one."""
        store, agent = self.sessions.store, self.target.agent
        session = store.session_with_agent(agent)
        if session is None:
            session = seen.session_for(f"agent:{agent}")
            if session is not None and store.has_session(session) and store.session_agent(session) is None:
                store.set_session_agent(session, agent)
            else:
                session = store.new_session(f"Attached: {self.agent_npub[:20]}…", agent=agent)
        return session

    async def stop(self) -> None:
        self._pool.remove_state_listener(self._relay_state)
        if self._lists is not None:
            with contextlib.suppress(Exception):
                await self._lists.close()
        await self.link.stop()
        for task in list(self._pending):
            task.cancel()
        await self.target.close()

    # --- what every chat does (conversation.py) ------------------------------------------------------
    @property
    def agent_here(self) -> str | None:
        return self.target.agent

    @property
    def agent_session(self) -> str | None:
        return self.session_id

    async def new_session(self) -> str:
        """The one conversation with the agent (there is no other here)."""
        return self.session_id or await self.sessions.new()

    async def session_messages(self, session_id: str) -> list[dict[str, Any]]:
        return await self.sessions.messages(session_id)

    async def refusal_to_open(self, session_id: str) -> str | None:
        return await self.sessions.refusal_to_open(session_id, self.agent_here)

    async def settle(self) -> None:
        """Nothing is saved behind a turn here: each message is saved as it is sent or comes."""

    # --- the turn ------------------------------------------------------------------------------------
    async def run_turn(self, session_id: str, message: str, kind: SessionKind = SessionKind.TERMINAL, *,
                       tools: ToolPolicy | None = None,
                       audience: TurnAudience = ADMIN_TURN) -> AsyncIterator[AgentEvent]:
        """Send ``message`` to the agent and wait (``[attach] reply_timeout_s``) for its reply, then (``[attach]
        report_wait_s``) for its prompt report. A message that reached no relay of the agent's is kept, marked
        failed; one not answered in time stays sent (a later reply shows when it comes)."""
        attach = self._settings
        refusal = await self.refusal_to_open(session_id)
        if refusal is not None:  # not the conversation with this agent: nothing is sent, nothing added to it
            yield TurnFailed(session_id, refusal, title="Another agent's conversation", retryable=False)
            return
        if self._pairing is not None and not self._pairing.done():  # judged as paired: after the agent's answer
            await asyncio.wait({self._pairing}, timeout=self._pairing_wait_s)
        try:
            rumor_id, sent = await self._send_turn(session_id, message)
        except DidactylError as exc:  # not sent (too many wait), or it went already (a late Retry)
            late = isinstance(exc, AlreadyDelivered)
            yield TurnFailed(session_id, exc.message, title=exc.title, retryable=False,
                             mark="delivered late" if late else "")
            return
        if not sent.ok:
            self.link.forget_reply(rumor_id)
            yield TurnFailed(session_id, f"{sent.detail}. Kept: it goes, once, when a relay of the agent's takes it "
                             "(or Retry)", title="Not delivered", retryable=True,
                             mark="not delivered: waits for the agent's relays")
            return
        reply = await self.link.reply_to(rumor_id, attach.reply_timeout_s)
        if reply is None:
            yield TurnFailed(session_id, f"the agent has not answered within {attach.reply_timeout_s:g} s; its "
                             "reply shows here when it comes", title="No reply yet", retryable=False)
            return
        # Its prompt report comes with it: waited for a moment, its tool calls show above the reply, as they do here.
        grace = min(attach.report_before_reply_s, attach.report_wait_s) if self._agent_reports else 0.0
        report = await self.prompts.report(reply, grace) if grace else None
        calls = report.tool_calls if isinstance(report, RemoteReport) else ()
        await self._record(session_id, reply.id, reply.created_at, *conversation_messages(calls),
                           {"role": "assistant", "content": reply.text})
        for call in calls:
            yield ToolCallStarted(call.call_id, call.name, call.arguments, call.round)
            yield call
        yield TextDelta(reply.text)
        if report is None:
            report = await self.prompts.report(reply, attach.report_wait_s - grace)
            late_calls = report.tool_calls if isinstance(report, RemoteReport) else ()
            if late_calls and await self._record(session_id, f"calls:{reply.id}", reply.created_at,
                                                 *conversation_messages(late_calls)) is not None:
                for call in late_calls:  # they came after the reply was shown: below it
                    yield ToolCallStarted(call.call_id, call.name, call.arguments, call.round)
                    yield call
            calls = late_calls
        self._agent_reports = report is not None
        assembly, usage = await self.prompts.show(session_id, kind, report, reply.text)
        if assembly.layers:
            yield TurnStarted(session_id, assembly)
        yield TurnFinished(session_id, reply.text, list(calls), usage=usage)

    # --- sending, never into the void ----------------------------------------------------------------
    async def _send_turn(self, session_id: str, text: str) -> tuple[str, Delivery]:
        """A typed message (or its Retry) sent: its rumor id, its reply awaited from now on, and the delivery."""
        async with self._sending:
            if self._late.pop((session_id, text), None) is not None:  # Retry, after it went by itself
                raise AlreadyDelivered()
            outgoing = await self._outgoing(session_id, text)
            self.link.expect_reply(outgoing.rumor_id)
            sent, _ = await self.send(outgoing, session_id)
            return outgoing.rumor_id, sent

    async def _outgoing(self, session_id: str, text: str) -> Outgoing:
        """The message to send: the one waiting with these words (a retry is the same message), else a new one, kept
        until a relay of the agent's takes it."""
        assert self._undelivered is not None
        waiting = await asyncio.to_thread(self._undelivered.find, self.target.agent, session_id, text)
        if waiting is not None:
            return waiting.message
        message = await self.post.prepare(text)
        await asyncio.to_thread(self._undelivered.add, self.target.agent, session_id, message)
        return message

    async def send(self, message: Outgoing, session_id: str) -> tuple[Delivery, int]:
        """Deliver ``message`` (bounded); once a relay of the agent's took it, it is in the conversation: the delivery,
        and the message's position there (-1: not saved)."""
        assert self._undelivered is not None
        if not self.post.relays:  # none known at start: the agent may have published its list since
            with contextlib.suppress(DidactylError):
                await self.post.refresh()
        if not self.post.relays:
            why = self.target.relays.problem() or self._unreachable()
            await asyncio.to_thread(self._undelivered.tried, message.rumor_id, why)
            return Delivery(False, why), -1
        if message.own_copy is not None:
            self.link.already_shown(message.own_copy)
        sent = await self.post.deliver(message)
        if not sent.ok:
            await asyncio.to_thread(self._undelivered.tried, message.rumor_id, sent.detail)
            return sent, -1
        await asyncio.to_thread(self._undelivered.delivered, message.rumor_id)
        at = await self._record(session_id, message.rumor_id, message.created_at,
                                {"role": "user", "content": message.text})
        if sent.own_copy_refused and not self._told_blocked:
            self._told_blocked = True
            self._tell(f"the agent's relays take no messages for your key ({sent.own_copy_refused}): its answers "
                       "cannot reach you there. Pair with it: run the attach line `didactyl serve` prints (with "
                       f"--invite), or put [admin] pubkey = \"{encode_npub(self.target.admin_pubkey)}\" in its "
                       "config")
        return sent, -1 if at is None else at

    async def _send_waiting(self, *, announce: bool) -> None:
        """Every message waiting for the agent's relays, oldest first, each as written."""
        assert self._undelivered is not None
        waiting = await asyncio.to_thread(self._undelivered.waiting, self.target.agent)
        for item in waiting:
            async with self._sending:
                if not await asyncio.to_thread(self._undelivered.find, self.target.agent, item.session_id,
                                               item.message.text):
                    continue  # a retry sent it meanwhile
                sent, at = await self.send(item.message, item.session_id)
                if sent.ok and announce:
                    self._late[(item.session_id, item.message.text)] = item.message.rumor_id
                    self._emit(AttachedDelivered(item.session_id, item.message.text, sent.detail, at))
        left = len(await asyncio.to_thread(self._undelivered.waiting, self.target.agent))
        if left and not announce:
            self._tell(f"{left} message{'s' if left > 1 else ''} to the agent wait{'' if left > 1 else 's'} for a "
                       f"relay of its to take them ({waiting[-1].reason or 'not tried yet'}); sent once one does")

    async def _send_waiting_on_connect(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._send_waiting(announce=True)
            except DidactylError as exc:
                log.warning("attach: waiting messages were not sent: %s", exc.message)

    def _relay_state(self, url: str, state: ConnectionState) -> None:
        if state is ConnectionState.CONNECTED and url in self.post.relays:
            self._wake.set()

    def _unreachable(self) -> str:
        named = self.target.relays.urls
        return (f"the agent's relays ({', '.join(named)}) are this app's own relay here: a loopback address names the "
                "machine it is used on, so an agent on another machine is not reached there. Give a relay both "
                "machines reach (docs/attach.md)")

    def _say_where(self) -> None:
        """Once at start: where messages go, or why nowhere."""
        relays = self.target.relays
        if self.post.relays:
            log.info("attach: messages go to %s (%s)", ", ".join(self.post.relays), relays.source)
        else:
            self._tell(f"nothing can be sent to the agent: {relays.problem() or self._unreachable()}")

    def _tell(self, message: str) -> None:
        """What the person must act on (nothing sent, no pairing): shown until dismissed."""
        log.warning("%s", message)
        self._emit(ServiceWarning(message, lasting=True))

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    # --- messages from elsewhere ---------------------------------------------------------------------
    async def _record(self, session_id: str, rumor_id: str, created_at: int, *entries: dict[str, Any]) -> int | None:
        """Save one message of the conversation (with the tool calls that came before it) unless it is already
        there: where it was saved (its first entry's position; -1: new but not saved), None when it was there."""
        assert self._seen is not None
        async with self._adding:
            new = await asyncio.to_thread(self._seen.add_new, session_id, [(rumor_id, created_at)])
            if not new:
                return None
            try:
                return (await asyncio.to_thread(self.sessions.store.append, session_id, list(entries))).start
            except DidactylError as exc:
                self._warn(f"a message with the agent was not saved: {exc.message}")
                return -1

    async def _add(self, message: LinkMessage, *, announce: bool = True) -> None:
        role = "assistant" if message.from_agent else "user"
        if message.from_agent and message.reply_to in self._late.values():  # answered: its words may be sent anew
            self._late = {k: v for k, v in self._late.items() if v != message.reply_to}
        at = await self._record(self.session_id, message.id, message.created_at,
                                {"role": role, "content": message.text})
        if at is not None:
            if announce:
                self._emit(AttachedMessage(self.session_id, role, message.text, at))
                if message.from_agent and message.reply_to:  # a reply no turn waited for: its prompt too
                    self._spawn(self._late_reply(message), "attach-late-report")

    async def _late_reply(self, reply: LinkMessage) -> None:
        """A reply no turn waited for: its report waited for as a turn waits; its tool calls kept with the chat (after
        the reply, as a late report's), its prompt shown and kept like any turn's."""
        report = await self.prompts.report(reply, self._settings.report_wait_s)
        calls = report.tool_calls if isinstance(report, RemoteReport) else ()
        at = await self._record(self.session_id, f"calls:{reply.id}", reply.created_at,
                                *conversation_messages(calls)) if calls else None
        if at is not None:
            self._emit(AttachedToolCalls(self.session_id, tuple(calls), at))
        await self.prompts.show(self.session_id, SessionKind.TERMINAL, report, reply.text)

    def _arrived(self, message: LinkMessage) -> None:
        self._spawn(self._add(message), "attach-message")
