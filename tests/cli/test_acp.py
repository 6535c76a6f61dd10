"""``didactyl acp`` driven by an ACP client from the SDK (agent-client-protocol), as an editor would: initialize →
session/new with an MCP server (the SDK fixture server over stdio) → session/prompt against the scripted model. The
reply streams as chunks; memory_save is a tool call whose event is on the relay; the MCP tool asks through
session/request_permission; the prompt's assembly is offered; session/load replays the conversation; session/cancel
stops a turn. The real console entry in a subprocess, real litellm against the HTTP stub, our relay."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import AllowedOutcome, DeniedOutcome, McpServerStdio, RequestPermissionResponse
from agent_support import AGENT_KEY
from cli_support import cli_env
from llm_stub import LlmStub, Reply, ToolCall
from mcp_support import FIXTURE
from memory_support import held, text_of
from relay_servers import running_relay

pytestmark = pytest.mark.usefixtures("warm_litellm")

CONFIG = ('[llm]\nmodel = "openai/stub-model"\napi_base = "{url}"\napi_key_env = "STUB_KEY"\n'
          '[relays]\nembedded = false\nurls = ["{relay}"]\ntimeout_s = 2.0\n[memory]\nbackend = "none"\n')
SAVE = json.dumps({"type": "short_term", "content": "Ada likes tea."})


class Editor:
    """The client side: what the agent sends, kept; permission answered with ``answer``."""

    def __init__(self, answer: str | None = "allow_once") -> None:
        self.updates: list[Any] = []
        self.asked: list[Any] = []
        self.extensions: list[tuple[str, dict[str, Any]]] = []
        self.answer = answer
        self.asked_event = asyncio.Event()
        self.hold = asyncio.Event()  # set: answer at once; cleared: wait (a cancel test)
        self.hold.set()

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.asked.append((tool_call, [o.option_id for o in options]))
        self.asked_event.set()
        await self.hold.wait()
        if self.answer is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answer))

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.extensions.append((method, params))

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    def of(self, kind: str) -> list[Any]:
        return [u for u in self.updates if u.session_update == kind]


async def until(predicate: Any, what: str, timeout_s: float = 30.0) -> None:
    """The SDK hands each notification to its own task and a response straight to its waiter, so what the agent sent
    before its answer may still be on its way through the client's handlers when the answer has come."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"never came: {what}")
        await asyncio.sleep(0.01)


def _env(tmp_path: Path, stub: LlmStub, relay_url: str) -> dict[str, str]:
    return cli_env(tmp_path, CONFIG.format(url=stub.base_url, relay=relay_url), DIDACTYL_NSEC=AGENT_KEY.nsec(),
                   STUB_KEY="sk")


def _fixture_server() -> McpServerStdio:
    return McpServerStdio(name="fx", command=sys.executable, args=[str(FIXTURE)], env=[])


async def test_an_editor_drives_the_agent_memory_save_reaches_the_relay_and_the_mcp_tool_asks(tmp_path: Path) -> None:
    editor = Editor()
    async with LlmStub() as stub, running_relay(tmp_path) as relay:
        stub.script(Reply.tools(ToolCall("memory_save", SAVE, id="save"),
                                ToolCall("fx__echo", json.dumps({"text": "hi"}), id="echo")),
                    # A pause after the first piece: the turn's deltas (one per ~40 ms) cannot all be one.
                    Reply.text_reply("Saved, and it echoed.", chunks=["Saved, ", "and it ", "echoed."],
                                     pauses={0: 0.5}))
        async with spawn_agent_process(editor, sys.executable, "-m", "didactyl_tui", "acp",
                                       env=_env(tmp_path, stub, relay.url)) as (conn, _process):
            hello = await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), 60)
            assert hello.agent_capabilities.load_session and hello.agent_info.name == "didactyl"
            session = (await asyncio.wait_for(conn.new_session(cwd=str(tmp_path), mcp_servers=[_fixture_server()]),
                                              90)).session_id
            done = await asyncio.wait_for(conn.prompt(session_id=session, prompt=[text_block("remember and echo")]),
                                          120)
            assert done.stop_reason == "end_turn"
            await until(lambda: "".join(u.content.text for u in editor.of("agent_message_chunk")) ==
                        "Saved, and it echoed." and len(editor.of("tool_call_update")) == 2 and editor.extensions,
                        "the turn's updates")

            chunks = [u.content.text for u in editor.of("agent_message_chunk")]
            assert len(chunks) >= 2 and "".join(chunks) == "Saved, and it echoed."
            started = {u.tool_call_id: u for u in editor.of("tool_call")}
            assert started["save"].title == "memory_save" and started["save"].kind == "edit"
            assert started["echo"].title == "fx__echo" and started["echo"].raw_input == {"text": "hi"}
            ended = {u.tool_call_id: u for u in editor.of("tool_call_update")}
            assert ended["save"].status == "completed" and ended["echo"].status == "completed"
            assert ended["echo"].raw_output == "echo: hi"
            assert relay.url in json.loads(ended["save"].raw_output)["accepted_by"]
            [(call, options)] = editor.asked  # only the tool that acts asked; memory_save is the agent's own
            assert call.tool_call_id == "echo" and "MCP server fx" in call.title
            assert options == ["allow_once", "allow_always", "reject_once"]
            thoughts = [u.content.text for u in editor.of("agent_thought_chunk")]
            assert any(t.startswith("Prompt: ") and "fx__echo (MCP server fx)" in t for t in thoughts)
            [(method, params)] = editor.extensions
            assert method == "_didactyl/prompt_assembly" and params["sessionId"] == session
            assert params["assembly"]["tool_origins"]["memory_save"] == "didactyl"
            # The same save path as the app: the signed, encrypted version is on the relay.
            assert [text_of(ev) for ev in await held(relay)] == ["Ada likes tea."]

            # session/load: a new client's view of the stored conversation, replayed.
            editor.updates.clear()
            await asyncio.wait_for(conn.load_session(cwd=str(tmp_path), session_id=session, mcp_servers=[]), 60)
            await until(lambda: len(editor.of("tool_call")) == 2 and editor.of("user_message_chunk") and "".join(
                u.content.text for u in editor.of("agent_message_chunk")) == "Saved, and it echoed.", "the replay")
            assert [u.content.text for u in editor.of("user_message_chunk")] == ["remember and echo"]
            assert "".join(u.content.text for u in editor.of("agent_message_chunk")) == "Saved, and it echoed."
            assert {u.tool_call_id for u in editor.of("tool_call")} == {"save", "echo"}


async def test_a_denied_permission_refuses_the_call_and_cancel_stops_a_turn(tmp_path: Path) -> None:
    editor = Editor(answer=None)
    async with LlmStub() as stub, running_relay(tmp_path) as relay:
        echo = Reply.tools(ToolCall("fx__echo", json.dumps({"text": "hi"}), id="echo"))
        stub.script(echo, Reply.text_reply("It was denied."), echo)
        async with spawn_agent_process(editor, sys.executable, "-m", "didactyl_tui", "acp",
                                       env=_env(tmp_path, stub, relay.url)) as (conn, _process):
            await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), 60)
            session = (await asyncio.wait_for(conn.new_session(cwd=str(tmp_path), mcp_servers=[_fixture_server()]),
                                              90)).session_id
            done = await asyncio.wait_for(conn.prompt(session_id=session, prompt=[text_block("echo")]), 120)
            assert done.stop_reason == "end_turn"
            await until(lambda: editor.of("tool_call_update"), "the call's end")
            [ended] = editor.of("tool_call_update")
            assert ended.status == "failed" and "denied by you" in ended.raw_output

            editor.hold.clear()  # the person has not answered when the editor cancels
            editor.asked_event.clear()
            turn = asyncio.create_task(conn.prompt(session_id=session, prompt=[text_block("echo again")]))
            await asyncio.wait_for(editor.asked_event.wait(), 120)
            await conn.cancel(session_id=session)
            assert (await asyncio.wait_for(turn, 60)).stop_reason == "cancelled"
            editor.hold.set()
