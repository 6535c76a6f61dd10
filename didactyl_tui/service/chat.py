"""Conversations and turns: the model in use (remembered in state.toml), sessions, prompt assembly, the
agent loop with tools dispatched to the memory backend first, then the registry. litellm is never imported
here (``preload_llm`` starts it in a thread, off the UI path).

Each turn is for an audience (agent/audience.py), decided by the caller once per turn: the terminal's and the
admin's own direct messages are the admin's; any other conversation a guest's. It decides what the prompt may carry
(the soul's sections, the memory backend's context) and what the tools show; the tool policy what they may do."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..actions import no_model_line
from ..agent.audience import ADMIN_TURN, TurnAudience
from ..agent.conversations.assembly_log import SavedAssembly
from ..agent.conversations.session_info import SessionInfo
from ..agent.conversations.session_kind import SessionKind
from ..agent.documents.keys import DocumentKey
from ..agent.soul.assembly import assemble, count_assembly, countable_texts
from ..agent.soul.prompt_record import PromptAssembly, SourceEvent
from ..agent.soul.template import SoulTemplate
from ..agent.tools.context import AgentToolContext
from ..agent.tools.permission import PermissionGate
from ..agent.tools.registry import Tool, ToolOutcome, ToolPolicy, ToolRegistry
from ..agent.turn.events import AgentEvent, TurnFailed, TurnFinished
from ..config import Config
from ..errors import AgentError, DidactylError
from .events import PromptAssembled, ServiceEvent
from .model import ModelService
from .notes import current_session_kind
from .permissions import gated, turn_registry, where_of
from .runtime import Runtime
from .sessions import Sessions

log = logging.getLogger("didactyl.service")

# The context tools that render a document of the agent's (the section's source is that document's version).
DOCUMENT_TOOLS: dict[DocumentKey, tuple[str, ...]] = {
    DocumentKey.SHORT_TERM: ("memory_short_term_read",),
    DocumentKey.TASKS: ("tasks_open_read", "task_list"),
}

# A prompt waits this long at most for the model helper to finish importing litellm (it counts the tokens).
HELPER_WAIT_S = 120.0


class ChatService:
    def __init__(self, runtime: Runtime, config: Config, registry: ToolRegistry, model: ModelService,
                 clock: Callable[[], float], emit: Callable[[ServiceEvent], None], warn: Callable[[str], None], *,
                 gate: PermissionGate | None = None) -> None:
        self._rt, self._config = runtime, config
        self._gate = gate or PermissionGate()  # none given: tools that act are refused (nobody may allow them)
        self._registry, self._model, self._clock, self._emit, self._warn = registry, model, clock, emit, warn
        self.sessions = Sessions(runtime.conversations, keep_assemblies=config.llm.saved_assemblies)
        self._background: set[asyncio.Future[Any]] = set()  # saves started while a turn was being cancelled

    # --- sessions (SQLite: on worker threads) -------------------------------------------------------
    async def new_session(self) -> str:
        return await asyncio.to_thread(self._rt.conversations.new_session)

    async def has_session(self, session_id: str) -> bool:
        return await asyncio.to_thread(self._rt.conversations.has_session, session_id)

    async def list_sessions(self) -> list[SessionInfo]:
        return await asyncio.to_thread(self._rt.conversations.list_sessions)

    async def session_messages(self, session_id: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._rt.conversations.messages, session_id)

    @property
    def agent_here(self) -> str | None:
        """The agent elsewhere this window is attached to (hex); None: this data dir's own agent answers here."""
        return None

    async def refusal_to_open(self, session_id: str) -> str | None:
        """Why the conversation ``session_id`` is not answered here (it is with another agent), and how to open it;
        None when it is this window's to continue."""
        return await self.sessions.refusal_to_open(session_id, self.agent_here)

    # --- the prompt ------------------------------------------------------------------------------
    def _backend_tools(self, registry: ToolRegistry | None = None) -> list[Tool]:
        policy = (registry or self._registry).policy
        return [t for t in self._rt.memory_manager.tools() if policy is None or policy.permits(t.name)]

    def tool_names(self, names: list[str]) -> tuple[frozenset[str], list[str]]:
        """``names`` (tools or aliases) as tool names, and those that name no tool."""
        backend = {t.name for t in self._rt.memory_manager.tools()}
        known, unknown = set(), []
        for name in names:
            tool = self._registry.get(name)
            if tool is not None or name in backend:
                known.add(tool.name if tool is not None else name)
            else:
                unknown.append(name)
        return frozenset(known), unknown

    def tool_names_offered(self) -> list[str]:
        return [t.name for t in self._registry.visible()] + [t.name for t in self._backend_tools() if t.visible]

    @property
    def soul(self) -> SoulTemplate:
        """The soul in use: the soul document's (the configured one until the relays hold one that reads)."""
        return self._rt.store.value(DocumentKey.SOUL)

    def _document_source(self, key: DocumentKey) -> SourceEvent | None:
        snap = self._rt.store.snapshot(key)
        if snap.event_id is None or snap.created_at is None:
            return None
        return SourceEvent(snap.event_id, snap.created_at, snap.relays)

    def _source_events(self) -> dict[str, SourceEvent]:
        """Provenance of every injected section: the document or identity event it came from (event, time,
        relays)."""
        rt = self._rt
        out: dict[str, SourceEvent] = {}
        for key, tools in DOCUMENT_TOOLS.items():
            source = self._document_source(key)
            if source is not None:
                out.update(dict.fromkeys(tools, source))
        out.update(rt.agent_cache.source_events("nostr_agent", "agent_identity"))
        if rt.admin_cache is not None:
            out.update(rt.admin_cache.source_events("nostr_admin", "admin_identity"))
        return out

    async def _backend_context(self, session_id: str, message: str | None,
                               audience: TurnAudience) -> tuple[str | None, str | None, str | None]:
        """(backend id, its context for this message, why it is withheld); the manager bounds time and swallows
        failures."""
        manager = self._rt.memory_manager
        if manager.backend is None:
            return None, None, None
        context, withheld = await manager.context_for(session_id, message, audience) if message else (None, None)
        return (manager.backend_id if manager.is_available() else None), context, withheld

    def _tool_context(self, audience: TurnAudience) -> AgentToolContext:
        """What the turn's tools run with: the service's context, told whom the turn is for."""
        ctx = self._rt.tool_context
        return ctx if audience == ctx.audience else dataclasses.replace(ctx, audience=audience)

    async def _assemble(self, session_id: str, message: str | None, *, dry_run: bool,
                        registry: ToolRegistry | None = None, audience: TurnAudience = ADMIN_TURN) -> PromptAssembly:
        from ..agent.llm.client import helper_ready

        registry = registry or self._registry
        # The model is needed now: its helper starts unless it runs (its tokenizer counts the prompt; the turn waits
        # for its litellm anyway).
        await helper_ready(HELPER_WAIT_S, start=self._config.llm.worker_process and self._model.configured)
        history, dropped = await asyncio.to_thread(self._rt.conversations.history_for_prompt, session_id,
                                                   self._model.name, self._config.llm.history_tokens)
        backend_id, context, withheld = await self._backend_context(session_id, message, audience)
        # Assembled here, from the caches as they are now, uncounted: a count may be a round trip to the model
        # helper, so the texts are counted on a worker thread (one batch) and the numbers filled in.
        draft = assemble(
            self.soul, model=self._model.name, registry=registry, ctx=self._tool_context(audience),
            created_at=self._clock(), history=list(history), history_dropped=int(dropped), user_message=message,
            backend_id=backend_id, backend_context=context, backend_tools=self._backend_tools(registry),
            backend_place=self._config.memory.backend_context,
            source_events=self._source_events(), soul_source=self._document_source(DocumentKey.SOUL),
            dry_run=dry_run, audience=audience, backend_withheld=withheld, count=None,
        )
        counts = await asyncio.to_thread(self._count, list(countable_texts(draft)))
        assembly = count_assembly(draft, counts.__getitem__)
        self._emit(PromptAssembled(assembly))
        return assembly

    def _count(self, texts: list[str]) -> dict[str, int]:
        """(A worker thread.) The tokens of ``texts`` for the model in use, and its context window learned on the way
        (the status bar shows the prompt against it: views read it without waiting, ModelService.context_window)."""
        from ..agent.llm.tokens import count_texts

        self._model.ask_context_window()
        return count_texts(self._model.name, texts)

    async def dry_run(self, session_id: str, message: str | None = None, *, audience: TurnAudience = ADMIN_TURN,
                      tools: ToolPolicy | None = None) -> PromptAssembly:
        """The next prompt, assembled from the caches, without calling the model (for ``audience``, with the tools
        ``tools`` permits: a guest's prompt as the guest's turn would have it)."""
        registry = turn_registry(self._registry.restricted(tools), self._gate, where_of(SessionKind.TERMINAL, audience))
        return await self._assemble(session_id, message, dry_run=True, registry=registry,
                                    audience=audience)

    # --- the turn ----------------------------------------------------------------------------------
    async def dispatch_tool(self, name: str, arguments: str | dict[str, Any] | None,
                            registry: ToolRegistry | None = None, audience: TurnAudience = ADMIN_TURN) -> ToolOutcome:
        """A tool call from the model: the memory backend's tools first, then the registry (``registry``: the
        turn's, restricted by its tool policy; ``audience``: whom the turn is for)."""
        registry = registry or self._registry
        policy = registry.policy
        if policy is not None and any(t.name == name for t in self._rt.memory_manager.tools()):
            if not policy.permits(name):
                return ToolOutcome(name, policy.refusal(name), True, refused=True)
        outcome = await self._rt.memory_manager.call_tool(name, arguments)
        if outcome is not None:
            return outcome
        return await gated(self._gate, registry, name, arguments, where_of(current_session_kind.get(), audience),
                           lambda: registry.call(name, arguments, self._tool_context(audience),
                                                 also_offered=self._backend_tools(registry)))

    async def complete(self, messages: list[dict[str, Any]], *, max_chars: int, timeout_s: float) -> str:
        """One completion with the model in use and no tools, outside any chat (the merge view's model draft):
        through the agent's one door to the model, bounded in size (``max_chars`` of reply) and time. AgentError
        says why there is no answer (no model configured, the model failed, too long, too slow)."""
        from ..agent.llm import client as llm
        from ..agent.llm.errors import LlmError

        if not self._model.name.strip():
            raise AgentError(no_model_line(self._config.keys), "No model configured")
        parts: list[str] = []
        size = 0
        try:
            async with asyncio.timeout(timeout_s), contextlib.aclosing(
                    llm.stream_chat(self._llm_settings(), messages)) as stream:
                async for chunk in stream:
                    parts.append(chunk.text)
                    size += len(chunk.text)
                    if size > max_chars:
                        raise AgentError(f"the model's answer passed {max_chars:,} characters: stopped", "Model")
        except LlmError as exc:
            raise AgentError(exc.message, "Model") from None
        except TimeoutError:
            raise AgentError(f"the model did not answer within {timeout_s:g} s", "Model") from None
        return "".join(parts)

    def _llm_settings(self) -> Any:
        # Every [llm] setting flows through; the model, its server and its key variable are the choice's.
        return self._model.llm_settings()

    async def run_turn(self, session_id: str, message: str, kind: SessionKind = SessionKind.TERMINAL, *,
                       tools: ToolPolicy | None = None,
                       audience: TurnAudience = ADMIN_TURN) -> AsyncIterator[AgentEvent]:
        """One turn of a ``kind`` session. LLM errors end it with TurnFailed (never raised). A finished turn is saved
        whole; a failed or cancelled one keeps the user's message and what the turn had said and done so far, marked
        (shown, never sent again: agent/turn/record.py); an ephemeral one (``kind.keeps_conversation`` false) saves
        nothing. The memory backend learns from it only for terminal and DM sessions (``kind.records_turns``; a
        guest's for that conversation alone). ``tools`` narrows what the model may call (None: every tool);
        ``audience`` what its prompt may carry (the admin's: everything)."""
        from ..agent.turn import loop
        from ..agent.turn.record import TurnRecord

        registry = turn_registry(self._registry.restricted(tools), self._gate, where_of(kind, audience))

        async def dispatch(name: str, arguments: str | dict[str, Any] | None) -> ToolOutcome:
            return await self.dispatch_tool(name, arguments, registry, audience)

        refusal = await self.refusal_to_open(session_id)
        if refusal is not None:  # another agent's conversation: nothing is added to it, nothing answers in it
            yield TurnFailed(session_id, refusal, title="Another agent's conversation", retryable=False)
            return
        if not self._model.name.strip():
            await self._persist_unanswered(session_id, message, "failed", kind)
            yield TurnFailed(session_id, no_model_line(self._config.keys), title="No model configured",
                             retryable=False)
            return
        try:
            assembly = await self._assemble(session_id, message, dry_run=False, registry=registry, audience=audience)
        except DidactylError as exc:
            await self._persist_unanswered(session_id, message, "failed", kind)
            yield TurnFailed(session_id, exc.message, title=exc.title, retryable=False)
            return
        ended, record = False, TurnRecord()
        token = current_session_kind.set(kind)  # who may confirm a note (post_note) in this turn
        try:
            async for event in loop.run_turn(settings=self._llm_settings(), assembly=assembly,
                                             dispatch=dispatch, session_id=session_id,
                                             max_tool_rounds=self._config.llm.max_tool_rounds):
                record.take(event)
                if isinstance(event, TurnFinished):
                    ended = True
                    await self._persist_turn(session_id, message, event, kind, audience)
                    usage = event.usage
                    await self._log_assembly(session_id, kind, SavedAssembly(
                        assembly, reply=event.reply, prompt_tokens=usage.prompt_tokens,
                        completion_tokens=usage.completion_tokens, cost_usd=usage.cost_usd))
                elif isinstance(event, TurnFailed):
                    ended = True
                    await self._persist_unanswered(session_id, message, "failed", kind, record.so_far("interrupted"))
                    await self._log_assembly(session_id, kind, SavedAssembly(assembly, failure=event.message))
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            if not ended and kind.keeps_conversation:  # cancelled: a worker thread finishes the save
                self._save_in_background(session_id, message, "cancelled",
                                         SavedAssembly(assembly, failure="cancelled"), record.so_far("cancelled"))
            raise
        finally:
            current_session_kind.reset(token)

    async def _persist_turn(self, session_id: str, message: str, event: TurnFinished, kind: SessionKind,
                            audience: TurnAudience) -> None:
        if kind.keeps_conversation:
            from ..agent.turn.record import finished_messages

            try:
                await asyncio.to_thread(self._rt.conversations.append, session_id,
                                        [{"role": "user", "content": message}, *finished_messages(event)])
            except DidactylError as exc:
                self._warn(f"the conversation was not saved: {exc.message}")
        if kind.records_turns:
            manager = self._rt.memory_manager
            record = manager.record_turn if audience.admin else manager.record_conversation_turn
            await record(session_id, message, event.reply)

    def _save_unanswered(self, session_id: str, message: str, status: str,
                         so_far: list[dict[str, Any]] | None = None) -> None:
        try:
            self._rt.conversations.append(session_id, [{"role": "user", "content": message, "status": status},
                                                       *(so_far or ())])
        except DidactylError as exc:
            self._warn(f"the {status} message was not saved: {exc.message}")

    def _save_assembly(self, session_id: str, saved: SavedAssembly) -> None:
        try:
            self.sessions.assembly_log.add(session_id, saved)
        except DidactylError as exc:  # the inspector's record only: the chat itself is saved
            log.warning("a prompt assembly was not kept: %s", exc.message)

    async def _persist_unanswered(self, session_id: str, message: str, status: str, kind: SessionKind,
                                  so_far: list[dict[str, Any]] | None = None) -> None:
        if kind.keeps_conversation:
            await asyncio.to_thread(self._save_unanswered, session_id, message, status, so_far)

    async def _log_assembly(self, session_id: str, kind: SessionKind, saved: SavedAssembly) -> None:
        if kind.keeps_conversation:
            await asyncio.to_thread(self._save_assembly, session_id, saved)

    def _save_in_background(self, session_id: str, message: str, status: str, saved: SavedAssembly,
                            so_far: list[dict[str, Any]]) -> None:
        def save() -> None:
            self._save_unanswered(session_id, message, status, so_far)
            self._save_assembly(session_id, saved)

        try:
            future = asyncio.get_running_loop().run_in_executor(None, save)
        except RuntimeError:  # no loop any more (the generator closed at shutdown): save here, once
            save()
            return
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    async def settle(self) -> None:
        """Wait for saves started while a turn was being cancelled (tests; the service's stop)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)


_preload: list[threading.Thread] = []  # the one litellm import of this process


def preload_llm(worker: bool = True, idle_exit_s: float = 0.0) -> threading.Thread | None:
    """Get the model client ready for its first turn (the TUI calls this once its service has started). With
    ``worker`` the client is the helper process (it imports litellm, on the other core; this process never does),
    which starts when a model is first needed and stops after ``idle_exit_s`` unused: nothing starts now (None).
    Without, litellm is imported here in a background thread, once; the thread is returned, so a caller can tell
    when it is done (e.g. to freeze what it loaded out of the GC)."""
    if worker:
        from ..agent.llm import client as llm

        llm.use_helper(idle_exit_s)
        return None
    if _preload:
        return _preload[0]

    def run() -> None:
        try:
            from ..agent.llm import client as llm

            llm.preload()
        except Exception:
            log.exception("preloading litellm failed")

    thread = threading.Thread(target=run, name="litellm-preload", daemon=True)
    _preload.append(thread)
    thread.start()
    return thread
