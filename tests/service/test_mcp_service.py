"""An MCP server's tools in the agent's turns, through the service as the app and the commands use it: offered after
the built-in tools and before the memory backend's, each named with its server in the prompt record; run only after
the permission gate (the person at the terminal, the config headless), never offered to or run for a guest; a server
that hangs at start holds nothing up."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from llm_stub import LlmStub, Reply, ToolCall
from mcp_support import fixture_server
from service_support import stub_config, stub_service

from didactyl_tui.agent.audience import guest_turn
from didactyl_tui.agent.conversations.session_kind import SessionKind
from didactyl_tui.agent.tools.permission import Decision, PermissionRequest
from didactyl_tui.agent.tools.registry import ToolPolicy
from didactyl_tui.agent.turn.events import TurnFinished
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import McpServersChanged
from didactyl_tui.service.state import read_state


def _config(base_url: str, *servers, backend: str = "none"):
    cfg = stub_config(base_url, backend)
    cfg.mcp.servers = list(servers) or [fixture_server("fx")]
    cfg.mcp.start_timeout_s = 60
    return cfg


async def _echo_turn(svc: AppService, stub: LlmStub, kind: SessionKind, **turn) -> TurnFinished:
    stub.script(Reply.tools(ToolCall("fx__echo", json.dumps({"text": "hi"}))), Reply.text_reply("done"))
    session = await svc.chat.new_session()
    events = [e async for e in svc.chat.run_turn(session, "echo hi", kind, **turn)]
    assert isinstance(events[-1], TurnFinished), events[-1]
    return events[-1]


async def test_the_person_allows_an_mcp_call_at_the_terminal_and_a_headless_turn_is_refused(tmp_path: Path) -> None:
    asked: list[PermissionRequest] = []

    async def person(request: PermissionRequest) -> Decision:
        asked.append(request)
        return Decision.ONCE

    async with LlmStub() as stub, stub_service(_config(stub.base_url, backend="recall"), tmp_path) as svc:
        await asyncio.wait_for(svc.mcp.wait_started(), 120)
        offered = svc.prompt.tool_names_offered()
        mcp = [i for i, name in enumerate(offered) if name.startswith("fx__")]
        base = [i for i, name in enumerate(offered) if name == "write_file"]
        backend = [i for i, name in enumerate(offered) if name == "memory_query"]  # the recall backend's
        assert mcp and base and backend and base[0] < mcp[0] and mcp[-1] < backend[0], offered  # the Skald order
        svc.permissions.register_asker(person)

        [call] = (await _echo_turn(svc, stub, SessionKind.TERMINAL)).tool_calls
        assert (call.result, call.ending, call.permission) == ("echo: hi", "done", "allowed once by you")
        assert [(r.tool, r.origin, json.loads(r.arguments)) for r in asked] == [
            ("fx__echo", "MCP server fx", {"text": "hi"})]
        sent = [t["function"]["name"] for t in stub.requests[0].body["tools"]]
        assert "fx__echo" in sent

        [refused] = (await _echo_turn(svc, stub, SessionKind.HEADLESS_CHAT)).tool_calls
        assert refused.ending == "refused" and "nobody here can allow it" in refused.result
        assert len(asked) == 1  # nobody was asked for the headless turn

        assembly = await svc.prompt.dry_run(await svc.chat.new_session(), "hi")
        origins = assembly.tool_origins
        assert origins["fx__echo"] == "MCP server fx" and origins["memory_save"] == "didactyl"
        assert origins["memory_query"] == "memory backend recall"
        assert set(origins) == set(assembly.tool_names)  # every tool offered says where it comes from


async def test_a_guest_is_never_offered_an_mcp_tool_nor_runs_one_even_when_listed(tmp_path: Path) -> None:
    asked: list[PermissionRequest] = []

    async def person(request: PermissionRequest) -> Decision:
        asked.append(request)
        return Decision.ALWAYS

    async with LlmStub() as stub, stub_service(_config(stub.base_url), tmp_path) as svc:
        await asyncio.wait_for(svc.mcp.wait_started(), 120)
        svc.permissions.register_asker(person)
        listed = ToolPolicy(frozenset({"fx__echo", "my_npub", "post_note"}), "a guest's conversation")
        guest = guest_turn()
        assembly = await svc.prompt.dry_run(await svc.chat.new_session(), "hi", audience=guest, tools=listed)
        assert assembly.tool_names == ["my_npub"]
        [call] = (await _echo_turn(svc, stub, SessionKind.DM_GUEST, tools=listed, audience=guest)).tool_calls
        assert call.ending == "refused" and "not available" in call.result
        assert "fx__echo" not in [t["function"]["name"] for t in stub.requests[0].body.get("tools", [])]
        assert asked == []


async def test_always_is_kept_in_state_and_a_new_run_does_not_ask_again(tmp_path: Path) -> None:
    asked: list[str] = []

    async def person(request: PermissionRequest) -> Decision:
        asked.append(request.tool)
        return Decision.ALWAYS

    async with LlmStub() as stub:
        async with stub_service(_config(stub.base_url), tmp_path) as svc:
            await asyncio.wait_for(svc.mcp.wait_started(), 120)
            svc.permissions.register_asker(person)
            [call] = (await _echo_turn(svc, stub, SessionKind.TERMINAL)).tool_calls
            assert call.permission == "allowed by you, always"
        assert read_state(tmp_path / "data").get("always_allowed_tools") == ["fx__echo"]
        async with stub_service(_config(stub.base_url), tmp_path) as again:
            await asyncio.wait_for(again.mcp.wait_started(), 120)
            again.permissions.register_asker(person)
            [call] = (await _echo_turn(again, stub, SessionKind.TERMINAL)).tool_calls
            assert call.result == "echo: hi" and call.permission == "allowed: you always allow it"
            assert asked == ["fx__echo"]
            assert again.permissions.revoke("fx__echo")
            await asyncio.wait_for(_until(lambda: read_state(tmp_path / "data").get("always_allowed_tools") == []), 30)


async def _until(predicate) -> None:
    while not await asyncio.to_thread(predicate):
        await asyncio.sleep(0.05)


async def test_a_server_that_hangs_at_start_holds_nothing_up_and_says_why(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        cfg = _config(stub.base_url, fixture_server("slow", "--hang-at-start"))
        cfg.mcp.start_timeout_s = 3
        svc = stub_service(cfg, tmp_path)
        changes: list[McpServersChanged] = []
        svc.add_listener(lambda e: changes.append(e) if isinstance(e, McpServersChanged) else None)
        async with svc:
            stub.script(Reply.text_reply("hello"))
            session = await svc.chat.new_session()
            events = [e async for e in svc.chat.run_turn(session, "hi", SessionKind.TERMINAL)]
            assert isinstance(events[-1], TurnFinished) and events[-1].reply == "hello"
            await asyncio.wait_for(svc.mcp.wait_started(), 60)
            assert changes[-1].failed == ("slow: failed — did not start within 3 s",)
            assert not any(name.startswith("slow__") for name in svc.prompt.tool_names_offered())


async def test_server_everything_echo_runs_when_allowed_is_refused_headless_and_never_offered_to_a_guest(
        tmp_path: Path, everything_server) -> None:
    asked: list[str] = []

    async def person(request: PermissionRequest) -> Decision:
        asked.append(request.tool)
        return Decision.ONCE

    echo = Reply.tools(ToolCall("everything__echo", json.dumps({"message": "hello"})))
    async with LlmStub() as stub, stub_service(_config(stub.base_url, everything_server), tmp_path) as svc:
        await asyncio.wait_for(svc.mcp.wait_started(), 120)
        assert "everything__echo" in svc.prompt.tool_names_offered(), svc.mcp.statuses()
        svc.permissions.register_asker(person)
        session = await svc.chat.new_session()
        stub.script(echo, Reply.text_reply("ok"))
        finished = [e async for e in svc.chat.run_turn(session, "echo", SessionKind.TERMINAL)][-1]
        [ran] = finished.tool_calls
        assert ran.ending == "done" and "hello" in ran.result and asked == ["everything__echo"]
        stub.script(echo, Reply.text_reply("ok"))
        finished = [e async for e in svc.chat.run_turn(session, "echo", SessionKind.HEADLESS_CHAT)][-1]
        assert finished.tool_calls[0].ending == "refused" and asked == ["everything__echo"]
        listed = ToolPolicy(frozenset({"everything__echo", "my_npub"}), "a guest's conversation")
        guest = await svc.prompt.dry_run(session, "hi", audience=guest_turn(), tools=listed)
        assert guest.tool_names == ["my_npub"]
