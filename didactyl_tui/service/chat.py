"""Conversations and turns: the model in use (remembered in state.toml), sessions, prompt assembly, the
agent loop with tools dispatched to the memory backend first, then the registry. litellm is never imported
here (``preload_llm`` starts it in a thread, off the UI path)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from ..agent.conversations import SessionInfo
from ..agent.events import AgentEvent, TurnFailed, TurnFinished
from ..agent.memory.store import MemoryType
from ..agent.prompt_record import PromptAssembly, SourceEvent
from ..agent.session_kind import SessionKind
from ..agent.soul import SoulTemplate, assemble
from ..agent.tools.registry import Tool, ToolOutcome, ToolRegistry
from ..config import Config
from ..errors import ConfigError, DidactylError
from . import state
from .events import PromptAssembled, ServiceEvent
from .notes import current_session_kind
from .runtime import Runtime

log = logging.getLogger("didactyl.service")

NO_MODEL = "set $DIDACTYL_MODEL or [llm] model in the config (e.g. openai/gpt-4o-mini)"


class ModelChoice:
    """The model in use: $DIDACTYL_MODEL, else the one switched to at runtime (state.toml), else config.toml."""

    def __init__(self, config: Config, env: Mapping[str, str], data_dir: Any) -> None:
        self._data_dir = data_dir
        self.name = config.llm.model
        if not env.get("DIDACTYL_MODEL", "").strip():
            remembered = state.read_state(data_dir).get("model")
            if isinstance(remembered, str) and remembered.strip():
                self.name = remembered.strip()

    def set(self, name: str) -> None:
        name = name.strip()
        if not name:
            raise ConfigError("a model name cannot be empty", "Model")
        self.name = name
        state.remember(self._data_dir, "model", name)


class ChatService:
    def __init__(self, rt: Runtime, config: Config, env: Mapping[str, str], soul: SoulTemplate,
                 registry: ToolRegistry, model: ModelChoice, clock: Callable[[], float],
                 emit: Callable[[ServiceEvent], None], warn: Callable[[str], None]) -> None:
        self._rt, self._config, self._env, self.soul = rt, config, env, soul
        self._registry, self._model, self._clock, self._emit, self._warn = registry, model, clock, emit, warn

    # --- sessions (SQLite: on worker threads) -------------------------------------------------------
    async def new_session(self) -> str:
        return await asyncio.to_thread(self._rt.conversations.new_session)

    async def has_session(self, session_id: str) -> bool:
        return await asyncio.to_thread(self._rt.conversations.has_session, session_id)

    async def list_sessions(self) -> list[SessionInfo]:
        return await asyncio.to_thread(self._rt.conversations.list_sessions)

    async def session_messages(self, session_id: str) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._rt.conversations.messages, session_id)

    # --- the prompt ------------------------------------------------------------------------------
    def _backend_tools(self) -> list[Tool]:
        return self._rt.memory_manager.tools()

    def tool_names_offered(self) -> list[str]:
        return [t.name for t in self._registry.visible()] + [t.name for t in self._backend_tools() if t.visible]

    def _source_events(self) -> dict[str, SourceEvent]:
        """Provenance of every injected section: memory, and each identity section (event, time, relays)."""
        rt = self._rt
        out: dict[str, SourceEvent] = {}
        snap = rt.store.snapshot(MemoryType.SHORT_TERM)
        if snap.event_id is not None and snap.created_at is not None:
            out["memory_short_term_read"] = SourceEvent(snap.event_id, snap.created_at, snap.relays)
        out.update(rt.agent_cache.source_events("nostr_agent", "agent_identity"))
        if rt.admin_cache is not None:
            out.update(rt.admin_cache.source_events("nostr_admin", "admin_identity"))
        return out

    async def _backend_context(self, session_id: str, message: str | None) -> tuple[str | None, str | None]:
        """(backend id, its context for this message); the manager bounds time and swallows failures."""
        manager = self._rt.memory_manager
        if manager.backend is None:
            return None, None
        context = await manager.query_context(session_id, message) if message else None
        return (manager.backend_id if manager.is_available() else None), context

    async def _assemble(self, session_id: str, message: str | None, *, dry_run: bool) -> PromptAssembly:
        history, dropped = await asyncio.to_thread(self._rt.conversations.history_for_prompt, session_id,
                                                   self._model.name, self._config.llm.history_tokens)
        backend_id, context = await self._backend_context(session_id, message)
        assembly = assemble(
            self.soul, model=self._model.name, registry=self._registry, ctx=self._rt.tool_context,
            created_at=self._clock(), history=list(history), history_dropped=int(dropped), user_message=message,
            backend_id=backend_id, backend_context=context, backend_tools=self._backend_tools(),
            source_events=self._source_events(), dry_run=dry_run,
        )
        self._emit(PromptAssembled(assembly))
        return assembly

    async def dry_run(self, session_id: str, message: str | None = None) -> PromptAssembly:
        """The next prompt, assembled from the caches, without calling the model."""
        return await self._assemble(session_id, message, dry_run=True)

    # --- the turn ----------------------------------------------------------------------------------
    async def dispatch_tool(self, name: str, arguments: str | dict[str, Any] | None) -> ToolOutcome:
        """A tool call from the model: the memory backend's tools first, then the registry."""
        outcome = await self._rt.memory_manager.call_tool(name, arguments)
        if outcome is not None:
            return outcome
        return await self._registry.call(name, arguments, self._rt.tool_context)

    def _llm_settings(self) -> Any:
        from ..agent.llm import LlmSettings

        # Every [llm] setting flows through; only the model is this service's choice.
        return dataclasses.replace(LlmSettings.from_config(self._config.llm, self._env), model=self._model.name)

    async def run_turn(self, session_id: str, message: str,
                       kind: SessionKind = SessionKind.TERMINAL) -> AsyncIterator[AgentEvent]:
        """One turn of a ``kind`` session. LLM errors end it with TurnFailed (never raised); nothing is persisted
        then. The memory backend learns from it only for terminal and DM sessions (``kind.records_turns``)."""
        from ..agent import loop

        if not self._model.name.strip():
            yield TurnFailed(session_id, NO_MODEL, title="No model configured", retryable=False)
            return
        try:
            assembly = await self._assemble(session_id, message, dry_run=False)
        except DidactylError as exc:
            yield TurnFailed(session_id, exc.message, title=exc.title, retryable=False)
            return
        token = current_session_kind.set(kind)  # who may confirm a note (post_note) in this turn
        try:
            async for event in loop.run_turn(settings=self._llm_settings(), assembly=assembly,
                                             dispatch=self.dispatch_tool, session_id=session_id,
                                             max_tool_rounds=self._config.llm.max_tool_rounds):
                if isinstance(event, TurnFinished):
                    await self._persist_turn(session_id, message, event, kind)
                yield event
        finally:
            current_session_kind.reset(token)

    async def _persist_turn(self, session_id: str, message: str, event: TurnFinished, kind: SessionKind) -> None:
        try:
            await asyncio.to_thread(self._rt.conversations.append, session_id,
                                    [{"role": "user", "content": message}, *event.new_messages])
        except DidactylError as exc:
            self._warn(f"the conversation was not saved: {exc.message}")
        if kind.records_turns:
            await self._rt.memory_manager.record_turn(session_id, message, event.reply)


_preload: list[threading.Thread] = []  # the one litellm import of this process


def preload_llm() -> threading.Thread:
    """Start importing litellm in a background thread (the TUI calls this after its first paint); once.
    Returns the thread, so a caller can tell when litellm's objects exist (e.g. to freeze them out of the GC)."""
    if _preload:
        return _preload[0]

    def run() -> None:
        try:
            from ..agent import llm

            llm.preload()
        except Exception:
            log.exception("preloading litellm failed")

    thread = threading.Thread(target=run, name="litellm-preload", daemon=True)
    _preload.append(thread)
    thread.start()
    return thread
