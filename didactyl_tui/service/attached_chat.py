"""The chat when the agent runs elsewhere (``didactyl attach``): a turn is a NIP-17 message to the agent and its
reply, and the inspector's entry is the agent's prompt report for that reply (or "not available").

One conversation per agent (its DM session with the admin), kept in this data dir and filled from the relays: at
start, up to ``[attach] history`` past messages between the admin and the agent; then each message as it comes,
whoever wrote it (a late reply, the admin on another device). A message is added once (its rumor id is kept in
``attach.sqlite3``). The methods the views use are :class:`~.chat.ChatService`'s; those that need the model here
(a dry run, the merge view's model draft) say why they cannot.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ..agent.audience import ADMIN_TURN, TurnAudience
from ..agent.conversations.assembly_log import SavedAssembly
from ..agent.conversations.seen_messages import SeenMessages
from ..agent.conversations.session_kind import SessionKind
from ..agent.dm.prompt_report import RemoteReport, ReportError, read_report, unavailable_assembly
from ..agent.llm.usage import Usage
from ..agent.soul.prompt_record import PromptAssembly
from ..agent.tools.registry import ToolPolicy, ToolRegistry
from ..agent.turn.events import (
    AgentEvent,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)
from ..config import Config
from ..errors import AgentError, DidactylError
from ..nostr.nip19 import encode_npub
from ..nostr.paging import PageBounds
from .attach import AttachTarget
from .attach_inbox import wrap_opener
from .attach_link import AttachLink, LinkBounds, LinkMessage
from .chat import ChatService
from .events import AttachedMessage, PromptAssembled, ServiceEvent
from .model import ModelService
from .runtime import Runtime
from .sessions import SEEN_DB

log = logging.getLogger("didactyl.attach")

NO_MODEL_HERE = "no model runs here: this window is attached to an agent that runs elsewhere"


class AttachedChat(ChatService):
    def __init__(self, runtime: Runtime, config: Config, registry: ToolRegistry, model: ModelService,
                 clock: Callable[[], float], emit: Callable[[ServiceEvent], None], warn: Callable[[str], None], *,
                 target: AttachTarget, data_dir: Path) -> None:
        super().__init__(runtime, config, registry, model, clock, emit, warn)
        self.target = target
        self._data_dir = data_dir
        attach = config.attach
        bounds = LinkBounds(PageBounds(max_pages=attach.history_max_pages, max_bytes=attach.history_max_bytes,
                                       timeout_s=attach.history_timeout_s),
                            max_waiting=attach.max_waiting, max_waiting_bytes=attach.max_waiting_bytes)
        self.link = AttachLink(runtime.pool, target.admin, target.agent, timeout_s=config.relays.timeout_s,
                               on_message=self._arrived, clock=clock, bounds=bounds,
                               opener=wrap_opener(target.admin, target.agent, target.admin_key))
        self._seen: SeenMessages | None = None
        self.session_id = ""
        self._pending: set[asyncio.Task[None]] = set()
        self._agent_reports = True  # the agent sent a report for its last reply (or none was asked yet)
        self._adding = asyncio.Lock()  # one message added at a time: the conversation keeps its order

    @property
    def agent_npub(self) -> str:
        return encode_npub(self.target.agent)

    # --- lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        """The conversation with the agent: found (or made), filled with what the relays hold, then followed."""
        self._seen = seen = await asyncio.to_thread(SeenMessages, self._data_dir / SEEN_DB)
        self._rt.closers.callback(seen.close)
        self.session_id = await asyncio.to_thread(self._conversation, seen)
        await self.link.start()
        for message in await self.link.history(self._config.attach.history):
            await self._add(message, announce=False)
        if self.link.history_cut:
            bound = {"pages": "history_max_pages", "bytes": "history_max_bytes", "time": "history_timeout_s"}
            self._warn(f"the conversation with the agent was read from the relays only in part: the read reached "
                       f"[attach] {bound[self.link.history_cut]} before the newest {self._config.attach.history} "
                       "messages were certain (many gift wraps for you: a flood?)")

    def _conversation(self, seen: SeenMessages) -> str:
        """The conversation with this agent: the one marked with its key, or the one attach.sqlite3 bound to it
        before conversations knew their agent (then marked), or a new one."""
        store, agent = self._rt.conversations, self.target.agent
        session = store.session_with_agent(agent)
        if session is None:
            session = seen.session_for(f"agent:{agent}")
            if session is not None and store.has_session(session) and store.session_agent(session) is None:
                store.set_session_agent(session, agent)
            else:
                session = store.new_session(f"Attached: {self.agent_npub[:20]}…", agent=agent)
        return session

    async def stop(self) -> None:
        await self.link.stop()
        for task in list(self._pending):
            task.cancel()
        await self.target.close()

    # --- what needs the model here -------------------------------------------------------------------
    async def new_session(self) -> str:
        """The one conversation with the agent (there is no other here)."""
        return self.session_id or await super().new_session()

    @property
    def agent_here(self) -> str | None:
        return self.target.agent

    async def dry_run(self, session_id: str, message: str | None = None, *, audience: TurnAudience = ADMIN_TURN,
                      tools: ToolPolicy | None = None) -> PromptAssembly:
        raise AgentError("the prompt is assembled where the agent runs; each reply's assembly shows in the "
                         "inspector when the agent sends it", "Attached")

    async def complete(self, messages: list[dict[str, Any]], *, max_chars: int, timeout_s: float) -> str:
        raise AgentError(NO_MODEL_HERE, "Attached")

    # --- the turn ------------------------------------------------------------------------------------
    async def run_turn(self, session_id: str, message: str, kind: SessionKind = SessionKind.TERMINAL, *,
                       tools: ToolPolicy | None = None,
                       audience: TurnAudience = ADMIN_TURN) -> AsyncIterator[AgentEvent]:
        """Send ``message`` to the agent and wait (``[attach] reply_timeout_s``) for its reply, then (``[attach]
        report_wait_s``) for its prompt report. A message that reached no relay of the agent's is kept, marked
        failed; one not answered in time stays sent (a later reply shows when it comes)."""
        attach = self._config.attach
        refusal = await self.refusal_to_open(session_id)
        if refusal is not None:  # not the conversation with this agent: nothing is sent, nothing added to it
            yield TurnFailed(session_id, refusal, title="Another agent's conversation", retryable=False)
            return
        try:
            rumor_id = await self.link.send(message)
        except DidactylError as exc:
            await self._persist_unanswered(session_id, message, "failed", kind)
            yield TurnFailed(session_id, exc.message, title=exc.title, retryable=True)
            return
        await self._record(session_id, rumor_id, int(self._clock()), {"role": "user", "content": message})
        reply = await self.link.reply_to(rumor_id, attach.reply_timeout_s)
        if reply is None:
            yield TurnFailed(session_id, f"the agent has not answered within {attach.reply_timeout_s:g} s; its "
                             "reply shows here when it comes", title="No reply yet", retryable=False)
            return
        # Its prompt report comes with it: waited for a moment, its tool calls show above the reply, as they do here.
        grace = min(attach.report_before_reply_s, attach.report_wait_s) if self._agent_reports else 0.0
        report = await self._report(reply, grace) if grace else None
        calls = report.tool_calls if isinstance(report, RemoteReport) else ()
        await self._record(session_id, reply.id, reply.created_at, *_call_messages(calls),
                           {"role": "assistant", "content": reply.text})
        for call in calls:
            yield ToolCallStarted(call.call_id, call.name, call.arguments, call.round)
            yield call
        yield TextDelta(reply.text)
        if report is None:
            report = await self._report(reply, attach.report_wait_s - grace)
            late = report.tool_calls if isinstance(report, RemoteReport) else ()
            if late and await self._record(session_id, f"calls:{reply.id}", reply.created_at,
                                           *_call_messages(late)):
                for call in late:  # they came after the reply was shown: below it
                    yield ToolCallStarted(call.call_id, call.name, call.arguments, call.round)
                    yield call
            calls = late
        self._agent_reports = report is not None
        assembly, usage = self._assembly_of(report)
        self._emit(PromptAssembled(assembly))
        if assembly.layers:
            yield TurnStarted(session_id, assembly)
        usage = usage or Usage()
        await self._log_assembly(session_id, kind, SavedAssembly(
            assembly, reply=reply.text, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            cost_usd=usage.cost_usd))
        yield TurnFinished(session_id, reply.text, list(calls), usage=usage)

    async def _report(self, reply: LinkMessage, wait: float) -> RemoteReport | str | None:
        """The agent's prompt report for ``reply`` within ``wait`` seconds (None: none came; a str: why it cannot be
        read)."""
        rumor = await self.link.report_for(reply.id, wait)
        if rumor is None:
            return None
        try:
            return await asyncio.to_thread(read_report, rumor)
        except ReportError as exc:
            return exc.message

    def _assembly_of(self, report: RemoteReport | str | None) -> tuple[PromptAssembly, Usage | None]:
        if isinstance(report, RemoteReport):
            return report.assembly, report.usage
        why = (f"the agent's prompt assembly could not be read: {report}" if report is not None else
               f"the agent sent no prompt assembly for this reply within {self._config.attach.report_wait_s:g} s (its "
               "[dm] prompt_report may be off)")
        return unavailable_assembly(why, created_at=self._clock(), agent=self.target.agent), None

    # --- messages from elsewhere ---------------------------------------------------------------------
    async def _record(self, session_id: str, rumor_id: str, created_at: int, *entries: dict[str, Any]) -> bool:
        """Save one message of the conversation (with the tool calls that came before it) unless it is already
        there; whether it was new."""
        assert self._seen is not None
        async with self._adding:
            new = await asyncio.to_thread(self._seen.add_new, session_id, [(rumor_id, created_at)])
            if not new:
                return False
            try:
                await asyncio.to_thread(self._rt.conversations.append, session_id, list(entries))
            except DidactylError as exc:
                self._warn(f"a message with the agent was not saved: {exc.message}")
            return True

    async def _add(self, message: LinkMessage, *, announce: bool = True) -> None:
        role = "assistant" if message.from_agent else "user"
        if await self._record(self.session_id, message.id, message.created_at, {"role": role, "content": message.text}):
            if announce:
                self._emit(AttachedMessage(self.session_id, role, message.text))

    def _arrived(self, message: LinkMessage) -> None:
        task = asyncio.get_running_loop().create_task(self._add(message), name="attach-message")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)


def _call_messages(calls: tuple[ToolCallFinished, ...]) -> list[dict[str, Any]]:
    """The agent's tool calls as the conversation keeps a turn's (an assistant message naming the calls of each
    round, then each result), so a resumed chat shows them as it shows this app's own."""
    out: list[dict[str, Any]] = []
    for round_no in sorted({c.round for c in calls}):
        these = [c for c in calls if c.round == round_no]
        out.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}} for c in these]})
        out += [{"role": "tool", "tool_call_id": c.call_id, "content": c.result} for c in these]
    return out
