"""The agent as an ACP agent (Agent Client Protocol, Zed's SDK): an editor drives the same agent the app does — same
soul, same memory, the same save path to the relays — one conversation per ACP session.

- ``initialize``: what it can do (load a session; MCP servers over stdio and HTTP).
- ``session/new``: a new stored conversation; the client's MCP servers are started through ``[mcp]``'s machinery
  (agent/tools/mcp/), their tools offered beside the configured ones. ``session/load``: a stored conversation, its
  messages and tool calls replayed as updates, then continued.
- ``session/prompt``: one turn; the reply streams as ``agent_message_chunk``; every tool call (``memory_save``
  included) is a ``tool_call`` then a ``tool_call_update`` with its result; the prompt's assembly is offered as an
  ``agent_thought_chunk`` summary and, whole, as the extension notification ``_didactyl/prompt_assembly``.
- A tool that acts asks through ``session/request_permission`` (the permission gate's question: allow once, always,
  deny). ``session/cancel`` stops the turn (its part so far is kept, marked, as in the app).
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import TYPE_CHECKING, Any

from acp import PROTOCOL_VERSION, RequestError, start_tool_call, text_block, tool_content, update_tool_call
from acp.helpers import update_agent_message_text, update_agent_thought_text, update_user_message_text
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PermissionOptionKind,
    PromptResponse,
    ToolCallUpdate,
    ToolKind,
)

from ..config_mcp import McpServerConfig
from ..terminal_text import clean

if TYPE_CHECKING:
    from ..service.app import AppService
    from ..service.types import Decision, PermissionRequest

ASSEMBLY_NOTIFICATION = "_didactyl/prompt_assembly"
_session: contextvars.ContextVar[str | None] = contextvars.ContextVar("didactyl_acp_session", default=None)
_OPTIONS: tuple[tuple[str, str, PermissionOptionKind], ...] = (
    ("allow_once", "Allow once", "allow_once"), ("allow_always", "Always allow", "allow_always"),
    ("reject_once", "Deny", "reject_once"))
_EDITS = ("memory_save", "memory_insert", "memory_replace", "write_file", "task_", "soul_")


def tool_kind(name: str) -> ToolKind:
    """ACP's kind of a tool call, for the client's icon: edits of the agent's documents and files, reads, others."""
    if name.startswith(_EDITS):
        return "edit"
    if name.startswith(("read_file", "my_", "memory_query", "nostr_")) or name.endswith("_read"):
        return "read"
    return "other"


def mcp_config(server: Any) -> McpServerConfig:
    """A server an ACP client hands over (stdio or HTTP) as an ``[[mcp.servers]]`` entry; its values are taken as
    given (a ``${`` in them is kept, never read as one of our variables)."""

    def literal(value: str) -> str:
        return value.replace("${", "$${")

    if getattr(server, "url", None):
        return McpServerConfig(name=server.name, url=server.url,
                               headers={h.name: literal(h.value) for h in getattr(server, "headers", [])})
    return McpServerConfig(name=server.name, command=server.command, args=list(server.args),
                           env={e.name: literal(e.value) for e in server.env})


class DidactylAcpAgent:
    """One ACP connection's agent, over a started :class:`~didactyl_tui.service.app.AppService`."""

    def __init__(self, service: AppService) -> None:
        self._svc = service
        self._conn: Any = None
        self._turns: dict[str, asyncio.Task[PromptResponse]] = {}
        self._calls: dict[tuple[str, str], str] = {}  # (session, tool name) -> the id of its call running now
        self._withdraw = service.permissions.register_asker(self._ask)

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    def close(self) -> None:
        self._withdraw()

    # --- the protocol -------------------------------------------------------------------------------
    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kwargs: Any) -> InitializeResponse:
        from .. import package_version

        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(load_session=True, mcp_capabilities=McpCapabilities(http=True)),
            agent_info=Implementation(name="didactyl", title="didactyl", version=package_version()))

    async def new_session(self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any) -> NewSessionResponse:
        session = await self._svc.chat.new_session()
        await self._connect(session, mcp_servers or [])
        return NewSessionResponse(session_id=session)

    async def load_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           **kwargs: Any) -> LoadSessionResponse:
        await self._known(session_id)
        await self._connect(session_id, mcp_servers or [])
        for message in await self._svc.chat.session_messages(session_id):
            await self._replay(session_id, message)
        return LoadSessionResponse()

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        await self._known(session_id)
        text = "\n".join(block.text for block in prompt if getattr(block, "type", "") == "text").strip()
        if not text:
            raise RequestError.invalid_params({"message": "the prompt holds no text"})
        if session_id in self._turns:
            raise RequestError.invalid_request({"message": "a turn is already running in this session"})
        turn = asyncio.create_task(self._turn(session_id, text), name=f"acp-turn-{session_id[:8]}")
        self._turns[session_id] = turn
        try:
            return await asyncio.shield(turn)
        except asyncio.CancelledError:
            if turn.cancelled():  # session/cancel: the turn stopped, its part so far kept (marked)
                return PromptResponse(stop_reason="cancelled")
            turn.cancel()
            raise
        finally:
            self._turns.pop(session_id, None)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        turn = self._turns.get(session_id)
        if turn is not None:
            turn.cancel()

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None

    # --- one turn -----------------------------------------------------------------------------------
    async def _turn(self, session: str, text: str) -> PromptResponse:
        from ..service.types import (
            SessionKind,
            TextDelta,
            ToolCallFinished,
            ToolCallStarted,
            TurnFailed,
            TurnFinished,
            TurnStarted,
        )

        _session.set(session)  # the permission gate's question goes to this session
        send = self._conn.session_update
        # Someone is at the editor to ask: a turn as the terminal's (the gate asks through session/request_permission).
        async for event in self._svc.chat.run_turn(session, text, SessionKind.TERMINAL):
            if isinstance(event, TurnStarted):
                await self._offer_assembly(session, event.assembly)
            elif isinstance(event, TextDelta):
                await send(session, update_agent_message_text(event.text))
            elif isinstance(event, ToolCallStarted):
                self._calls[(session, event.name)] = event.call_id
                await send(session, start_tool_call(event.call_id, clean(event.name), kind=tool_kind(event.name),
                                                    status="in_progress", raw_input=event.arguments))
            elif isinstance(event, ToolCallFinished):
                self._calls.pop((session, event.name), None)
                words = f"{event.permission}\n{event.result}" if event.permission else event.result
                await send(session, update_tool_call(
                    event.call_id, status="failed" if event.is_error else "completed",
                    content=[tool_content(text_block(clean(words)))], raw_output=event.result))
            elif isinstance(event, TurnFailed):
                raise RequestError.internal_error({"message": event.message, "title": event.title})
            elif isinstance(event, TurnFinished):
                return PromptResponse(stop_reason="max_tokens" if event.cut else "end_turn")
        raise RequestError.internal_error({"message": "the turn ended without a reply"})

    async def _offer_assembly(self, session: str, assembly: Any) -> None:
        """The prompt as it was put together: a thought line for every client, the whole record for those that read
        the extension notification."""
        record = assembly.to_json_dict()
        record.pop("messages", None)  # the same text again, section by section above
        shown = [s for s in record["sections"] if not s["skipped"]]
        origins = assembly.tool_origins
        tools = ", ".join(f"{name} ({origins.get(name, 'didactyl')})" for name in assembly.tool_names)
        line = (f"Prompt: {len(shown)} sections, {len(assembly.history)} history messages, "
                f"{assembly.total_tokens:,} tokens; tools offered: {tools or 'none'}")
        await self._conn.session_update(session, update_agent_thought_text(line))
        await self._conn.ext_notification(ASSEMBLY_NOTIFICATION, {"sessionId": session, "assembly": record})

    async def _ask(self, request: PermissionRequest) -> Decision:
        """The permission gate's question, asked of the client for the session whose turn is running."""
        from ..service.types import Decision

        session = _session.get()
        if session is None or self._conn is None:
            return Decision.DENY
        call_id = self._calls.get((session, request.tool), request.tool)
        options = [PermissionOption(option_id=i, name=n, kind=k) for i, n, k in _OPTIONS]
        call = ToolCallUpdate(tool_call_id=call_id, title=f"{request.tool} ({request.origin})",
                              kind=tool_kind(request.tool), status="pending",
                              content=[tool_content(text_block(request.arguments))])
        answer = await self._conn.request_permission(session_id=session, tool_call=call, options=options)
        outcome = answer.outcome
        if isinstance(outcome, AllowedOutcome):
            return {"allow_once": Decision.ONCE, "allow_always": Decision.ALWAYS}.get(outcome.option_id,
                                                                                       Decision.DENY)
        return Decision.DENY

    # --- sessions -----------------------------------------------------------------------------------
    async def _known(self, session: str) -> None:
        chat = self._svc.chat
        if not await chat.sessions.has(session):
            raise RequestError.resource_not_found(session)
        refusal = await chat.refusal_to_open(session)
        if refusal is not None:
            raise RequestError.invalid_params({"message": refusal})

    async def _connect(self, session: str, servers: list[Any]) -> None:
        """The client's MCP servers, started (each bounded); one that fails is said in the session, never fatal."""
        for server in servers:
            status = await self._svc.mcp.add(mcp_config(server))
            if status.state != "ready":
                await self._conn.session_update(session, update_agent_thought_text(f"MCP server {status.line}"))

    async def _replay(self, session: str, message: dict[str, Any]) -> None:
        send = self._conn.session_update
        role, content = message.get("role"), message.get("content")
        if role == "user" and isinstance(content, str):
            await send(session, update_user_message_text(content))
        elif role == "assistant":
            if isinstance(content, str) and content:
                await send(session, update_agent_message_text(content))
            for call in message.get("tool_calls") or []:
                name = call.get("function", {}).get("name", "")
                await send(session, start_tool_call(call.get("id", ""), clean(name), kind=tool_kind(name),
                                                    status="completed"))
        elif role == "tool" and isinstance(content, str):
            failed = message.get("ending") in ("error", "refused", "cancelled")
            await send(session, update_tool_call(message.get("tool_call_id", ""), status="failed" if failed else
                                                 "completed", content=[tool_content(text_block(clean(content)))]))
