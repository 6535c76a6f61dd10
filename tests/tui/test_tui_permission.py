"""Pilot: a tool that acts asks first in the app — the dialog names the tool, its server and its arguments (shown as
text, never markup); allow once, always (kept, and revocable in its own dialog) or deny; the decision shows on the
call in the conversation and in the inspector, which names each tool's origin. A server that hangs at start: the
app opens and answers, and the self pane says why its tools are missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply, ToolCall
from mcp_support import fixture_server
from tui_support import SIZE, click, make_app, make_config, screen_text, started, wait_for

from didactyl_tui.tui.screens.permission import AlwaysAllowedScreen, PermissionScreen
from didactyl_tui.tui.widgets.assembly_tree import AssemblyTree
from didactyl_tui.tui.widgets.tool_call_entry import ToolCallEntry

pytestmark = pytest.mark.usefixtures("warm_litellm")

ARGS = json.dumps({"text": "[bold red]hi[/] \x1b[2J"})


def _config(base_url: str, *servers):
    config = make_config(llm_base_url=base_url)
    config.mcp.servers = list(servers) or [fixture_server("fx")]
    config.mcp.start_timeout_s = 3 if servers else 60
    return config


async def _send(pilot, text: str) -> None:
    pilot.app.main_screen.chat_input.focus()
    await pilot.press(*text, "enter")


async def _mcp_ready(pilot) -> None:
    await wait_for(pilot, lambda: "fx__echo" in pilot.app.service.prompt.tool_names_offered(), 60, "the MCP tools")


def _entries(app) -> list[ToolCallEntry]:
    return list(app.main_screen.conversation.query(ToolCallEntry))


def _tree_labels(app) -> list[str]:
    labels: list[str] = []
    for tree in app.main_screen.query(AssemblyTree):
        stack = [tree.root]
        while stack:
            node = stack.pop()
            labels.append(str(node.label))
            stack.extend(node.children)
    return labels


async def test_the_person_allows_once_and_the_decision_shows_on_the_call_and_in_the_inspector(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.tools(ToolCall("fx__echo", ARGS)), Reply.text_reply("It echoed."))
        app = make_app(tmp_path, _config(stub.base_url))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            await _mcp_ready(pilot)
            await _send(pilot, "echo it")
            dialog = await wait_for(pilot, lambda: isinstance(app.screen, PermissionScreen) and app.screen, 30,
                                    "the question")
            shown = screen_text(app)
            assert "fx__echo (MCP server fx)" in shown and "[bold red]hi[/]" in shown  # text, never markup
            assert "\x1b" not in dialog.request.arguments
            await click(pilot, "#once")
            main = app.main_screen
            await wait_for(pilot, lambda: not main.streaming and main.conversation.last_reply(), 30, "the reply")
            [entry] = _entries(app)
            assert (entry.ending, entry.permission) == ("done", "allowed once by you")
            assert entry.result == "echo: [bold red]hi[/] "
            await wait_for(pilot, lambda: "fx__echo · done · allowed once by you" in screen_text(app), 10, "the title")
            await pilot.press("f4")
            await wait_for(pilot, lambda: any(label.startswith("fx__echo · MCP server fx — ")
                                              for label in _tree_labels(app)), 10, "the tool's origin")
            labels = _tree_labels(app)
            assert any(label.startswith("memory_save · didactyl — ") for label in labels)
            assert any("fx__echo · done · allowed once by you" in label for label in labels)  # the round


async def test_denied_with_the_close_key_and_always_is_kept_and_revocable(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        call = Reply.tools(ToolCall("fx__echo", json.dumps({"text": "hi"})))
        stub.script(call, Reply.text_reply("It was denied."), call, Reply.text_reply("Done."),
                    call, Reply.text_reply("Done again."))
        app = make_app(tmp_path, _config(stub.base_url))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            await _mcp_ready(pilot)
            main = app.main_screen
            await _send(pilot, "one")
            await wait_for(pilot, lambda: isinstance(app.screen, PermissionScreen), 30, "the question")
            await pilot.press("escape")
            await wait_for(pilot, lambda: len(_entries(app)) == 1 and _entries(app)[0].ending, 30, "the call")
            assert (_entries(app)[0].ending, _entries(app)[0].permission) == ("refused", "denied by you")
            await wait_for(pilot, lambda: not main.streaming, 30, "the first reply")

            await _send(pilot, "two")
            await wait_for(pilot, lambda: isinstance(app.screen, PermissionScreen), 30, "the question again")
            await click(pilot, "#always")
            await wait_for(pilot, lambda: len(_entries(app)) == 2 and _entries(app)[1].ending, 30, "the second call")
            assert _entries(app)[1].permission == "allowed by you, always"
            await wait_for(pilot, lambda: not main.streaming, 30, "the second reply")

            await _send(pilot, "three")  # not asked again
            await wait_for(pilot, lambda: len(_entries(app)) == 3 and _entries(app)[2].ending, 30, "the third call")
            assert _entries(app)[2].permission == "allowed: you always allow it"
            await wait_for(pilot, lambda: not main.streaming, 30, "the third reply")

            app.action_tool_permissions()
            await wait_for(pilot, lambda: isinstance(app.screen, AlwaysAllowedScreen), 10, "the list")
            assert "fx__echo" in screen_text(app)
            await click(pilot, "#revoke-0")
            await wait_for(pilot, lambda: app.service.permissions.always == frozenset(), 10, "the revocation")


async def test_a_server_that_hangs_at_start_the_app_answers_and_the_self_pane_says_why(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("Hello there."))
        app = make_app(tmp_path, _config(stub.base_url, fixture_server("slow", "--hang-at-start")))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            await _send(pilot, "hi")
            await wait_for(pilot, lambda: not main.streaming and main.conversation.last_reply(), 30, "the reply")
            assert main.conversation.last_reply() == "Hello there."
            await pilot.press("f3")
            await wait_for(pilot, lambda: "slow: failed" in screen_text(app), 30, "the failure in the self pane")
            panes = [str(pane.render()) for pane in main.query("#mcp-status")]  # on screen the line may be wrapped
            assert any("slow: failed — did not start within 3 s" in text for text in panes), panes


async def test_a_server_that_hangs_mid_call_the_turn_goes_on_and_its_tools_are_withdrawn(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.tools(ToolCall("fx__hang", "{}")), Reply.text_reply("It did not answer."))
        config = _config(stub.base_url)
        config.mcp.call_timeout_s = 2
        app = make_app(tmp_path, config)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            await _mcp_ready(pilot)
            main = app.main_screen
            await _send(pilot, "wait for it")
            await wait_for(pilot, lambda: isinstance(app.screen, PermissionScreen), 30, "the question")
            await click(pilot, "#once")
            await wait_for(pilot, lambda: not main.streaming and main.conversation.last_reply(), 30, "the reply")
            assert main.conversation.last_reply() == "It did not answer."
            [entry] = _entries(app)
            assert entry.ending == "error" and "did not answer a call of hang within 2 s" in entry.result
            assert not any(name.startswith("fx__") for name in app.service.prompt.tool_names_offered())
            await pilot.press("f3")
            await wait_for(pilot, lambda: "fx: failed" in screen_text(app), 30, "the failure in the self pane")
            panes = [str(pane.render()) for pane in main.query("#mcp-status")]  # on screen the line is wrapped
            assert any("fx: failed — did not answer a call of hang within 2 s; its tools are withdrawn" in text
                       for text in panes), panes
