"""The prompt, assembled where the agent runs: the soul in use, the conversation's history, the memory backend's
context, the tools offered (the memory backend's first, then the registry's), each section with the event it came
from. The local chat (chat.py) assembles each turn's prompt here; a dry run (the inspector, ``didactyl prompt``) is
the same assembly without the model.

A window attached to an agent elsewhere has none (``AppService.prompt`` is None): that agent assembles its own and
sends it with each reply.

Each prompt is for an audience (agent/audience.py): it decides what the prompt may carry (the soul's sections, the
memory backend's context) and what the tools show; the tool policy (a restricted registry) what they may do."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from ..agent.audience import ADMIN_TURN, TurnAudience
from ..agent.conversations.session_kind import SessionKind
from ..agent.conversations.store import ConversationStore
from ..agent.documents.keys import DocumentKey
from ..agent.documents.versions import SourceEvent
from ..agent.memory.backend import MemoryManager
from ..agent.soul.assembly import assemble, count_assembly, countable_texts
from ..agent.soul.prompt_record import PromptAssembly
from ..agent.soul.template import SoulTemplate
from ..agent.tools.context import AgentToolContext
from ..agent.tools.permission import PermissionGate
from ..agent.tools.registry import Tool, ToolPolicy, ToolRegistry
from ..config import Config
from .events import PromptAssembled, ServiceEvent
from .model import ModelService
from .permissions import turn_registry, where_of

# The context tools that render a document of the agent's (the section's source is that document's version).
DOCUMENT_TOOLS: dict[DocumentKey, tuple[str, ...]] = {
    DocumentKey.SHORT_TERM: ("memory_short_term_read",),
    DocumentKey.TASKS: ("tasks_open_read", "task_list"),
}

# A prompt waits this long at most for the model helper to finish importing litellm (it counts the tokens).
HELPER_WAIT_S = 120.0


class PromptService:
    """The agent's prompt, from the caches as they are now (every read here is local: no relay is asked)."""

    def __init__(self, config: Config, *, registry: ToolRegistry, model: ModelService,
                 conversations: ConversationStore, memory_manager: MemoryManager, tool_context: AgentToolContext,
                 clock: Callable[[], float], emit: Callable[[ServiceEvent], None],
                 gate: PermissionGate | None = None) -> None:
        """``tool_context``: what the tools run with, and where the prompt reads the agent's documents and the
        agent's and admin's identities (the admin's follows [admin] pubkey while the service runs)."""
        self._config, self._registry, self._model = config, registry, model
        self._conversations, self._memory, self._tool_context = conversations, memory_manager, tool_context
        self._clock, self._emit = clock, emit
        self._gate = gate or PermissionGate()  # a dry run offers the tools a turn here would (the gate's view)

    # --- the tools ---------------------------------------------------------------------------------
    def backend_tools(self, registry: ToolRegistry | None = None) -> list[Tool]:
        """The memory backend's tools that ``registry``'s policy (the turn's) permits."""
        policy = (registry or self._registry).policy
        return [t for t in self._memory.tools() if policy is None or policy.permits(t.name)]

    def tool_names(self, names: list[str]) -> tuple[frozenset[str], list[str]]:
        """``names`` (tools or aliases) as tool names, and those that name no tool."""
        backend = {t.name for t in self._memory.tools()}
        known, unknown = set(), []
        for name in names:
            tool = self._registry.get(name)
            if tool is not None or name in backend:
                known.add(tool.name if tool is not None else name)
            else:
                unknown.append(name)
        return frozenset(known), unknown

    def tool_names_offered(self) -> list[str]:
        return [t.name for t in self._registry.visible()] + [t.name for t in self.backend_tools() if t.visible]

    def tool_context(self, audience: TurnAudience) -> AgentToolContext:
        """What the turn's tools run with: the service's context, told whom the turn is for."""
        ctx = self._tool_context
        return ctx if audience == ctx.audience else dataclasses.replace(ctx, audience=audience)

    # --- the sections' sources ---------------------------------------------------------------------
    @property
    def soul(self) -> SoulTemplate:
        """The soul in use: the soul document's (the configured one until the relays hold one that reads)."""
        soul: SoulTemplate = self._tool_context.memory.value(DocumentKey.SOUL)
        return soul

    def _document_source(self, key: DocumentKey) -> SourceEvent | None:
        snap = self._tool_context.memory.snapshot(key)
        if snap.event_id is None or snap.created_at is None:
            return None
        return SourceEvent(snap.event_id, snap.created_at, snap.relays)

    def _source_events(self) -> dict[str, SourceEvent]:
        """Provenance of every injected section: the document or identity event it came from (event, time,
        relays)."""
        out: dict[str, SourceEvent] = {}
        for key, tools in DOCUMENT_TOOLS.items():
            source = self._document_source(key)
            if source is not None:
                out.update(dict.fromkeys(tools, source))
        ctx = self._tool_context
        out.update(ctx.agent.source_events("nostr_agent", "agent_identity"))
        if ctx.admin is not None:
            out.update(ctx.admin.source_events("nostr_admin", "admin_identity"))
        return out

    async def _backend_context(self, session_id: str, message: str | None,
                               audience: TurnAudience) -> tuple[str | None, str | None, str | None]:
        """(backend id, its context for this message, why it is withheld); the manager bounds time and swallows
        failures."""
        manager = self._memory
        if manager.backend is None:
            return None, None, None
        context, withheld = await manager.context_for(session_id, message, audience) if message else (None, None)
        return (manager.backend_id if manager.is_available() else None), context, withheld

    # --- the assembly ------------------------------------------------------------------------------
    async def assemble(self, session_id: str, message: str | None, *, dry_run: bool,
                       registry: ToolRegistry | None = None, audience: TurnAudience = ADMIN_TURN) -> PromptAssembly:
        """The prompt of ``session_id``'s next turn (``message``: the user's, if any), counted; shown to the views as
        :class:`PromptAssembled`."""
        from ..agent.llm.client import helper_ready

        registry = registry or self._registry
        # The model is needed now: its helper starts unless it runs (its tokenizer counts the prompt; the turn waits
        # for its litellm anyway).
        await helper_ready(HELPER_WAIT_S, start=self._config.llm.worker_process and self._model.configured)
        history, dropped = await asyncio.to_thread(self._conversations.history_for_prompt, session_id,
                                                   self._model.name, self._config.llm.history_tokens)
        backend_id, context, withheld = await self._backend_context(session_id, message, audience)
        # Assembled here, from the caches as they are now, uncounted: a count may be a round trip to the model
        # helper, so the texts are counted on a worker thread (one batch) and the numbers filled in.
        draft = assemble(
            self.soul, model=self._model.name, registry=registry, ctx=self.tool_context(audience),
            created_at=self._clock(), history=list(history), history_dropped=int(dropped), user_message=message,
            backend_id=backend_id, backend_context=context, backend_tools=self.backend_tools(registry),
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
        return await self.assemble(session_id, message, dry_run=True, registry=registry, audience=audience)
