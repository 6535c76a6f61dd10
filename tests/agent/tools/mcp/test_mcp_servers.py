"""MCP servers' tools in the one registry: started over stdio with the SDK (a real server: tests/mcp_fixture_server.py),
named ``<server>__<tool>`` after the built-in tools, bounded at start and in every call, withdrawn with the reason when
a server fails, hangs or dies; results bounded and cleaned; the environment limited to what the config lists."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from mcp_support import fixture_server

from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.mcp.results import MAX_TOOL_NAME, tool_name
from didactyl_tui.agent.tools.mcp.servers import McpServers
from didactyl_tui.config_mcp import McpConfig, McpServerConfig


async def _started(config: McpConfig, env: dict[str, str] | None = None):
    registry = build_base_registry()
    servers = McpServers(config, registry, env or {})
    seen: list[str] = []
    servers.add_listener(lambda status: seen.append(status.line))
    servers.start()
    await asyncio.wait_for(servers.wait_started(), 120)
    return registry, servers, seen


async def test_a_servers_tools_are_offered_after_the_built_in_ones_and_run() -> None:
    registry, servers, _ = await _started(McpConfig(servers=[fixture_server("fx")]))
    try:
        names = [t.name for t in registry.visible()]
        base = [t.name for t in build_base_registry().visible()]
        assert names[:len(base)] == base  # the built-in tools first, as they were
        assert names[len(base):] == ["fx__echo", "fx__add", "fx__show_env", "fx__shout", "fx__hang", "fx__die"]
        echo = registry.get("fx__echo")
        assert echo is not None and echo.acts and echo.origin == "MCP server fx"
        assert echo.parameters["properties"]["text"]["type"] == "string"  # the schema as the server gave it
        assert (await registry.call("fx__echo", {"text": "hi"})).content == "echo: hi"
        assert (await registry.call("fx__add", {"a": 2, "b": 3})).content == "5"
        bad = await registry.call("fx__add", {"a": "two", "b": 3})  # checked against its schema before it is sent
        assert bad.is_error and "must be a whole number" in bad.content
        [status] = servers.statuses()
        assert status.state == "ready" and status.line == "fx: ready, 6 tools"
    finally:
        await servers.stop()
    assert not any(t.family == "mcp" for t in registry.all())  # stopped: withdrawn


async def test_servers_are_offered_in_the_configs_order_whatever_starts_first() -> None:
    registry, servers, _ = await _started(McpConfig(servers=[fixture_server("b"), fixture_server("a")]))
    try:
        mcp = [t.name.split("__")[0] for t in registry.visible() if t.family == "mcp"]
        assert mcp == ["b"] * 6 + ["a"] * 6
    finally:
        await servers.stop()


async def test_a_server_gets_only_what_the_config_lists_with_variables_taken_from_ours(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIDACTYL_TEST_API_KEY", "sk-secret")  # in this process's own environment too
    server = fixture_server("fx", env={"GREETING": "hello ${WHO} $${LITERAL}"})
    registry, servers, _ = await _started(McpConfig(servers=[server]),
                                          env={"WHO": "world", "DIDACTYL_TEST_API_KEY": "sk-secret",
                                               "PATH": os.environ.get("PATH", "/usr/bin")})
    try:
        assert (await registry.call("fx__show_env", {"name": "GREETING"})).content == "hello world ${LITERAL}"
        assert (await registry.call("fx__show_env", {"name": "DIDACTYL_TEST_API_KEY"})).content == "(unset)"
        assert (await registry.call("fx__show_env", {"name": "PATH"})).content != "(unset)"  # what a program needs
    finally:
        await servers.stop()


async def test_a_variable_that_is_not_set_fails_that_server_with_its_name() -> None:
    server = fixture_server("fx", env={"TOKEN": "${NOT_SET_ANYWHERE}"})
    registry, servers, _ = await _started(McpConfig(servers=[server]))
    [status] = servers.statuses()
    assert status.state == "failed" and "${NOT_SET_ANYWHERE}" in status.reason
    assert not any(t.family == "mcp" for t in registry.all())


async def test_servers_that_hang_fail_or_are_missing_at_start_fail_alone_with_their_reasons() -> None:
    config = McpConfig(start_timeout_s=20, servers=[  # a ready one must start within it on a loaded machine
        fixture_server("hangs", "--hang-at-start"), fixture_server("dies", "--die-at-start"),
        McpServerConfig(name="missing", command="didactyl-no-such-program"), fixture_server("fine")])
    registry, servers, _ = await _started(config)
    try:
        states = {s.name: s for s in servers.statuses()}
        assert states["fine"].state == "ready" and "fine__echo" in registry
        assert states["hangs"].state == "failed" and "did not start within 20 s" in states["hangs"].reason
        assert states["dies"].state == "failed" and "refusing to start (asked to)" in states["dies"].reason  # stderr
        assert states["missing"].state == "failed" and "was not found" in states["missing"].reason
    finally:
        await servers.stop()


async def test_a_call_that_hangs_is_ended_at_its_bound_and_the_servers_tools_withdrawn() -> None:
    registry, servers, seen = await _started(McpConfig(call_timeout_s=2, servers=[fixture_server("fx")]))
    try:
        outcome = await registry.call("fx__hang", {})
        assert outcome.is_error and "did not answer a call of hang within 2 s" in outcome.content
        assert not any(t.family == "mcp" for t in registry.all())
        [status] = servers.statuses()
        assert status.state == "failed" and "its tools are withdrawn" in status.reason
        assert seen[-1].startswith("fx: failed")
        again = await registry.call("fx__echo", {"text": "x"})
        assert again.is_error and "there is no tool" in again.content
    finally:
        await servers.stop()


async def test_a_server_that_dies_mid_call_is_withdrawn_with_the_reason() -> None:
    registry, servers, _ = await _started(McpConfig(servers=[fixture_server("fx")]))
    try:
        outcome = await registry.call("fx__die", {})
        assert outcome.is_error and outcome.content.startswith("Error: MCP server fx:")
        await asyncio.wait_for(_until(lambda: servers.statuses()[0].state == "failed"), 30)
        assert "fx__echo" not in registry
    finally:
        await servers.stop()


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.05)


async def test_results_are_bounded_and_cleaned_of_control_characters() -> None:
    registry, servers, _ = await _started(McpConfig(max_result_chars=1000, servers=[fixture_server("fx")]))
    try:
        outcome = await registry.call("fx__shout", {"size": 200_000})
        assert not outcome.is_error
        text = outcome.content
        assert len(text) < 1200 and "max_result_chars" in text
        assert "\x1b" not in text and "\x07" not in text
        assert "[bold red]x[/]" in text  # markup stays text (the views never parse it)
    finally:
        await servers.stop()


async def test_a_tool_over_the_schema_bound_or_past_the_count_is_left_out_and_said() -> None:
    _, servers, _ = await _started(McpConfig(max_tools_per_server=2, servers=[fixture_server("fx")]))
    try:
        [status] = servers.statuses()
        assert status.tools == ("fx__echo", "fx__add") and len(status.left_out) == 4
        assert all("max_tools_per_server" in why for why in status.left_out)
        assert "; 4 left out" in status.line
    finally:
        await servers.stop()


@pytest.mark.parametrize("raw", ["echo", "get-sum", "a.b/c d", "ünïcode", "x" * 200])
def test_tool_names_are_bounded_and_use_only_what_model_apis_accept(raw: str) -> None:
    name = tool_name("server", raw)
    assert name.startswith("server__") and len(name) <= MAX_TOOL_NAME
    assert all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


async def test_the_reference_server_everything_echo(everything_server: McpServerConfig) -> None:
    registry, servers, _ = await _started(McpConfig(servers=[everything_server]))
    try:
        assert servers.statuses()[0].state == "ready", servers.statuses()
        echo = registry.get("everything__echo")
        assert echo is not None and echo.acts and echo.origin == "MCP server everything"
        outcome = await registry.call("everything__echo", {"message": "hello"})
        assert not outcome.is_error and "hello" in outcome.content
        tiny = await registry.call("everything__get-tiny-image", {})  # an image is named, never inlined
        assert "[image (image/png" in tiny.content and len(json.dumps(tiny.content)) < 2000
    finally:
        await servers.stop()


async def test_waiting_for_servers_nobody_started_returns_at_once() -> None:
    registry = build_base_registry()
    servers = McpServers(McpConfig(servers=[fixture_server("fx")]), registry, {})
    await asyncio.wait_for(servers.wait_started(), 30)  # never started (attached, or a command without turns)
    assert not any(t.family == "mcp" for t in registry.all())
