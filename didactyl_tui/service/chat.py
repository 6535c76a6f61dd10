"""The chat when the agent runs here: a turn's prompt assembled (prompt.py), the agent loop with tools dispatched to
the memory backend first, then the registry, the conversation saved. litellm is never imported here
(``preload_llm`` starts it in a thread, off the UI path). It is one of the two :class:`~.conversation.Conversation`
parts (attached_chat.py is the other: the agent runs elsewhere).

Each turn is for an audience (agent/audience.py), decided by the caller once per turn: the terminal's and the
admin's own direct messages are the admin's; any other conversation a guest's. It decides what the prompt may carry
(the soul's sections, the memory backend's context) and what the tools show; the tool policy what they may do."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..actions import no_model_line
from ..agent.audience import ADMIN_TURN, TurnAudience
from ..agent.conversations.assembly_log import SavedAssembly
from ..agent.conversations.session_kind import SessionKind
from ..agent.memory.backend import MemoryManager
from ..agent.tools.permission import PermissionGate
from ..agent.tools.registry import ToolOutcome, ToolPolicy, ToolRegistry
from ..agent.turn.events import AgentEvent, TurnFailed, TurnFinished
from ..config import Config
from ..errors import DidactylError
from .model import ModelService
from .notes import current_session_kind
from .permissions import gated, turn_registry, where_of
from .prompt import PromptService
from .sessions import Sessions

log = logging.getLogger("didactyl.service")


class ChatService:
    """The chat when the agent runs here: each turn's prompt assembled (:class:`~.prompt.PromptService`), the model
    called with the tools, the conversation saved."""

    def __init__(self, config: Config, *, sessions: Sessions, prompt: PromptService, registry: ToolRegistry,
                 model: ModelService, memory_manager: MemoryManager, warn: Callable[[str], None],
                 gate: PermissionGate | None = None) -> None:
        """``gate``: who allows a tool that acts (none given: such tools are refused, nobody may allow them)."""
        self._config, self.sessions, self.prompt = config, sessions, prompt
        self._gate = gate or PermissionGate()
        self._registry, self._model, self._memory, self._warn = registry, model, memory_manager, warn
        self._conversations = sessions.store
        self._background: set[asyncio.Future[Any]] = set()  # saves started while a turn was being cancelled

    # --- what every chat does (conversation.py) ------------------------------------------------------
    @property
    def agent_here(self) -> str | None:
        """None: this data dir's own agent answers here."""
        return None

    @property
    def agent_session(self) -> str | None:
        """None: any conversation of this data dir's own agent opens here."""
        return None

    @property
    def agent_relays(self) -> list[str] | None:
        """None: the agent reads its own relays here."""
        return None

    async def new_session(self) -> str:
        return await self.sessions.new()

    async def session_messages(self, session_id: str) -> list[dict[str, Any]]:
        return await self.sessions.messages(session_id)

    async def refusal_to_open(self, session_id: str) -> str | None:
        """Why the conversation ``session_id`` is not answered here (it is with another agent), and how to open it;
        None when it is this window's to continue."""
        return await self.sessions.refusal_to_open(session_id, self.agent_here)

    async def start(self) -> None:
        """Nothing to start: the conversation store opened with the runtime."""

    async def stop(self) -> None:
        """Nothing runs between turns."""

    # --- the turn ----------------------------------------------------------------------------------
    async def dispatch_tool(self, name: str, arguments: str | dict[str, Any] | None,
                            registry: ToolRegistry | None = None, audience: TurnAudience = ADMIN_TURN) -> ToolOutcome:
        """A tool call from the model: the memory backend's tools first, then the registry (``registry``: the
        turn's, restricted by its tool policy; ``audience``: whom the turn is for)."""
        registry = registry or self._registry
        policy = registry.policy
        if policy is not None and any(t.name == name for t in self._memory.tools()):
            if not policy.permits(name):
                return ToolOutcome(name, policy.refusal(name), True, refused=True)
        outcome = await self._memory.call_tool(name, arguments)
        if outcome is not None:
            return outcome
        return await gated(self._gate, registry, name, arguments, where_of(current_session_kind.get(), audience),
                           lambda: registry.call(name, arguments, self.prompt.tool_context(audience),
                                                 also_offered=self.prompt.backend_tools(registry)))

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
            assembly = await self.prompt.assemble(session_id, message, dry_run=False, registry=registry,
                                                  audience=audience)
        except DidactylError as exc:
            await self._persist_unanswered(session_id, message, "failed", kind)
            yield TurnFailed(session_id, exc.message, title=exc.title, retryable=False)
            return
        ended, record = False, TurnRecord()
        token = current_session_kind.set(kind)  # who may confirm a note (post_note) in this turn
        try:
            async for event in loop.run_turn(settings=self._model.llm_settings(), assembly=assembly,
                                             dispatch=dispatch, session_id=session_id,
                                             max_tool_rounds=self._config.llm.max_tool_rounds):
                record.take(event)
                if isinstance(event, TurnFinished):
                    ended = True
                    await self._persist_turn(session_id, message, event, kind, audience)
                    usage = event.usage
                    await self.sessions.keep_assembly(session_id, kind, SavedAssembly(
                        assembly, reply=event.reply, prompt_tokens=usage.prompt_tokens,
                        completion_tokens=usage.completion_tokens, cost_usd=usage.cost_usd))
                elif isinstance(event, TurnFailed):
                    ended = True
                    await self._persist_unanswered(session_id, message, "failed", kind, record.so_far("interrupted"))
                    await self.sessions.keep_assembly(session_id, kind, SavedAssembly(assembly, failure=event.message))
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
                await asyncio.to_thread(self._conversations.append, session_id,
                                        [{"role": "user", "content": message}, *finished_messages(event)])
            except DidactylError as exc:
                self._warn(f"the conversation was not saved: {exc.message}")
        if kind.records_turns:
            manager = self._memory
            record = manager.record_turn if audience.admin else manager.record_conversation_turn
            await record(session_id, message, event.reply)

    def _save_unanswered(self, session_id: str, message: str, status: str,
                         so_far: list[dict[str, Any]] | None = None) -> None:
        try:
            self._conversations.append(session_id, [{"role": "user", "content": message, "status": status},
                                                       *(so_far or ())])
        except DidactylError as exc:
            self._warn(f"the {status} message was not saved: {exc.message}")

    async def _persist_unanswered(self, session_id: str, message: str, status: str, kind: SessionKind,
                                  so_far: list[dict[str, Any]] | None = None) -> None:
        if kind.keeps_conversation:
            await asyncio.to_thread(self._save_unanswered, session_id, message, status, so_far)

    def _save_in_background(self, session_id: str, message: str, status: str, saved: SavedAssembly,
                            so_far: list[dict[str, Any]]) -> None:
        def save() -> None:
            self._save_unanswered(session_id, message, status, so_far)
            self.sessions.keep_assembly_now(session_id, saved)

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
