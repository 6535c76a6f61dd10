"""Pilot tests of the everyday rough edges of issue #11: keys in a burst, Enter while starting, line breaks in
the user's bubble, F2/F3 from the inspector tree, the token gauge, the palette's keys, a narrow terminal."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply, ToolCall
from textual import events
from tui_support import SIZE, click, make_app, make_config, screen_text, started, wait_for

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.llm import client as llm
from didactyl_tui.agent.llm.types import LlmSettings
from didactyl_tui.service.drafts import Draft, draft_path, read_draft, write_draft
from didactyl_tui.tui.screens.confirm import UnsavedChangesScreen
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.widgets.message_entry import MessageEntry

# This process's model helper is warm before any test's deadline (conftest's warm_litellm).
pytestmark = pytest.mark.usefixtures("warm_litellm")


def burst(app, text: str, *then: str) -> None:
    """Keys as a terminal delivers a paste without bracketed paste, or `tmux send-keys 'hi' Enter`: all in
    one read, none waited for (Pilot's press waits after each key, so it never shows the race)."""
    for ch in text:
        key = {" ": "space", "\n": "enter"}.get(ch, ch)
        app._driver.send_message(events.Key(key, ch if ch != "\n" else "\r"))
    for key in then:
        app._driver.send_message(events.Key(key, "\r" if key == "enter" else None))


# --- 1. Enter never loses a message ---------------------------------------------------------------------


async def test_enter_in_a_burst_sends_the_whole_line(tmp_path: Path, stub: LlmStub) -> None:
    stub.script(Reply.text_reply("one"), Reply.text_reply("two"))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        main.chat_input.focus()
        await pilot.pause()
        burst(app, "hi there", "enter")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "one" and not main.streaming, 30, "reply")
        assert stub.requests[0].messages[-1] == {"role": "user", "content": "hi there"}
        assert main.chat_input.text == ""
        # Keys typed right after Enter belong to the next message, not this one.
        burst(app, "second", "enter")
        burst(app, "draft")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "two" and not main.streaming, 30, "reply 2")
        assert stub.requests[1].messages[-1] == {"role": "user", "content": "second"}
        await wait_for(pilot, lambda: main.chat_input.text == "draft", 5, "the draft")


async def test_enter_while_starting_queues_and_sends_when_ready(tmp_path: Path, stub: LlmStub) -> None:
    stub.script(Reply.text_reply("hello early bird"))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        main = app.main_screen
        assert not app.service_ready  # the service starts after the first frame
        main.chat_input.focus()
        burst(app, "early bird", "enter")
        await wait_for(pilot, lambda: main.chat.queued or app.service_ready, 10, "the queue")
        if not app.service_ready:  # the usual case; on a fast machine the service may beat the keys
            # The notice is a message to the app: it is shown a moment after the text is queued.
            await wait_for(pilot, lambda: any("will send when the agent is ready" in n.message
                                              for n in app._notifications), 10, "the notice")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "hello early bird", 30, "the queued send")
        assert stub.requests[0].messages[-1] == {"role": "user", "content": "early bird"}
        assert main.chat.queued == [] and main.chat_input.text == ""


async def test_a_message_queued_when_the_start_fails_goes_back_to_the_input(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        main = app.main_screen
        main.chat.queued.append("do not lose me")
        main.service_failed("the key file is unreadable")
        await pilot.pause()
        assert main.chat_input.text == "do not lose me" and main.chat.queued == []
        await pilot.press("enter")
        await pilot.pause()
        assert main.chat_input.text == "do not lose me"  # refused, said so, kept
        assert any("unreadable" in n.message for n in app._notifications)


# --- 4. the user's line breaks stay in the "you" bubble ----------------------------------------------------


async def test_line_breaks_in_your_own_message_are_shown(tmp_path: Path, stub: LlmStub) -> None:
    stub.script(Reply.text_reply("a reply\nthat wraps in markdown"))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        main.chat_input.focus()
        await pilot.press(*"roses are red", "ctrl+j", *"violets are blue", "enter")
        await wait_for(pilot, lambda: main.conversation.last_reply() and not main.streaming, 30, "the reply")
        await wait_for(pilot, lambda: "violets are blue" in screen_text(app)
                       and "a reply that wraps in markdown" in " ".join(screen_text(app).split()), 10, "both shown")
        (you,) = [e for e in main.conversation.query(MessageEntry) if e.role == "user"]
        assert you.text == "roses are red\nviolets are blue"
        lines = screen_text(app).splitlines()
        (first,) = [line for line in lines if "roses are red" in line]
        assert "violets" not in first  # two lines, not one
        assert any("violets are blue" in line for line in lines)
        assert "a reply that wraps in markdown" in " ".join(screen_text(app).split())  # replies: markdown as before
        assert stub.requests[0].messages[-1]["content"] == "roses are red\nviolets are blue"


# --- 3. F2/F3 work wherever the focus is ------------------------------------------------------------------


async def test_f2_f3_switch_panes_with_focus_in_the_inspector(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        await pilot.press("f5")  # a dry run: the inspector opens with an entry
        await wait_for(pilot, lambda: main.inspectors() and main.inspector.entries, 10, "the dry run")
        for key, pane in (("f2", "memory"), ("f3", "self")):
            for target in (main.inspector.assembly_tree, main.inspector.query_one("#open")):
                await pilot.press("f4")
                await wait_for(pilot, lambda: main.sidebar.active == "inspector")
                main.set_focus(target)
                await pilot.pause()
                assert app.focused is target
                await pilot.press(key)
                await wait_for(pilot, lambda pane=pane: main.sidebar.active == pane, 5, f"{key} from {target}")
                assert main.query_one("#sidebar-slot").display
        # Hiding the whole sidebar from inside it leaves the focus in the input, not on a hidden widget.
        await pilot.press("f4")
        await wait_for(pilot, lambda: main.sidebar.active == "inspector")
        main.set_focus(main.inspector.assembly_tree)
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert not main.query_one("#sidebar-slot").display and app.focused is main.chat_input


# --- 2. the memory editor never drops unsaved text ------------------------------------------------------


async def open_editor(pilot) -> MemoryEditorScreen:
    await pilot.press("f6")
    return await wait_for(pilot, lambda: isinstance(pilot.app.screen, MemoryEditorScreen) and pilot.app.screen,
                          10, "the editor")


async def test_editor_esc_asks_before_discarding_and_keeps_a_draft(tmp_path: Path) -> None:
    draft = draft_path(tmp_path, "short_term")
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        editor = await open_editor(pilot)
        await pilot.press(*"unsaved thought")
        await wait_for(pilot, draft.exists, 10, "the draft file")
        assert stat.S_IMODE(draft.stat().st_mode) == 0o600
        assert json.loads(draft.read_text())["text"] == "unsaved thought"

        await pilot.press("escape")  # ONE press: the question, not a silent close
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, UnsavedChangesScreen) and app.screen)
        assert "not saved" in screen_text(app)
        await click(pilot, "#keep")
        await wait_for(pilot, lambda: app.screen is editor)
        assert editor.text_area.text == "unsaved thought"

        await pilot.press("escape")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, UnsavedChangesScreen) and app.screen)
        await click(pilot, "#discard")
        await wait_for(pilot, lambda: app.screen is app.main_screen and not draft.exists(), 10, "the discard")
        assert app.service.documents.snapshot(DocumentKey.SHORT_TERM).content == ""  # nothing published
        assert dialog is not None

        # Unchanged text closes at once, no question.
        await open_editor(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main_screen, 5, "a plain close")


async def test_editor_save_from_the_question_publishes_and_closes(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        editor = await open_editor(pilot)
        editor.text_area.load_text("keep this")
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, UnsavedChangesScreen))
        await click(pilot, "#save")
        await wait_for(pilot, lambda: app.screen is app.main_screen, 10, "save and close")
        assert app.service.documents.snapshot(DocumentKey.SHORT_TERM).content == "keep this"
        await wait_for(pilot, lambda: not draft_path(tmp_path, "short_term").exists(), 5, "the draft removed")


async def test_editor_draft_survives_a_quit_and_comes_back(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await open_editor(pilot)
        await pilot.press(*"half a thought")
        await wait_for(pilot, draft_path(tmp_path, "short_term").exists, 10, "the draft file")
        await pilot.press("ctrl+q")  # quit with the editor open: no question, the draft stays

    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        editor = await open_editor(pilot)
        await wait_for(pilot, lambda: editor.text_area.text == "half a thought", 10, "the draft restored")
        assert "Restored your unsaved draft" in screen_text(app)
        assert editor.theirs is None  # begun on the version that is still current: nothing to resolve
        await pilot.press("ctrl+s")
        documents = app.service.documents
        await wait_for(pilot, lambda: documents.snapshot(DocumentKey.SHORT_TERM).content == "half a thought", 10)
        await wait_for(pilot, lambda: not draft_path(tmp_path, "short_term").exists(), 5, "the draft removed")


async def test_a_draft_begun_on_an_older_version_is_not_saved_over_the_newer(tmp_path: Path) -> None:
    write_draft(tmp_path, "short_term", "my old draft", "0" * 64, 8000)
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        editor = await open_editor(pilot)
        await wait_for(pilot, lambda: editor.text_area.text == "my old draft", 10, "the draft restored")
        assert editor.theirs is not None and editor.query_one("#editor-conflict").display
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "Not saved: a newer version arrived" in screen_text(app), 10)
        assert app.service.documents.snapshot(DocumentKey.SHORT_TERM).content == ""


def test_draft_file_bounds_and_bad_files(tmp_path: Path) -> None:
    assert not write_draft(tmp_path, "short_term", "x" * 41, None, 20)  # over twice the limit: not kept
    assert read_draft(tmp_path, "short_term", 20) is None
    path = draft_path(tmp_path, "short_term")
    path.parent.mkdir(parents=True, exist_ok=True)
    for junk in ("", "{", "[]", '{"text": 3}', json.dumps({"text": "y" * 41})):
        path.write_text(junk)
        assert read_draft(tmp_path, "short_term", 20) is None, junk
    assert write_draft(tmp_path, "short_term", "fine", None, 20, now=5.0)
    assert read_draft(tmp_path, "short_term", 20) == Draft("fine", None, 5.0)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


# --- 5. token figures: one request against the window, the session's cost ---------------------------------


def status_line(app) -> str:
    return next(line for line in screen_text(app).splitlines() if "relays" in line and "model" in line)


async def priced(stub: LlmStub, prompt_tokens: int, completion_tokens: int) -> float:
    """What the model client prices one gpt-4o-mini request of these sizes at (litellm's table, in its helper)."""
    stub.script(Reply.text_reply("priced", usage=(prompt_tokens, completion_tokens)))
    settings = LlmSettings(model="openai/gpt-4o-mini", api_base=stub.base_url, api_key="sk-price", timeout_s=30.0,
                           max_retries=0)
    [cost] = [c.usage.cost_usd async for c in llm.stream_chat(settings, [{"role": "user", "content": "price"}])
              if c.usage is not None]
    assert cost is not None and cost > 0
    return cost


async def test_status_shows_the_last_request_against_the_window_and_the_session_cost(tmp_path: Path,
                                                                                     stub: LlmStub) -> None:
    costs = [await priced(stub, *usage) for usage in ((1600, 5), (1700, 7), (1800, 9))]
    stub.script(Reply.tools(ToolCall("my_memory", "{}"), usage=(1600, 5)), Reply.text_reply("done", usage=(1700, 7)),
                Reply.text_reply("again", usage=(1800, 9)))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url, model="openai/gpt-4o-mini"))
    async with app.run_test(size=(160, 40)) as pilot:
        await started(pilot)
        main, status = app.main_screen, app.main_screen.status
        main.chat_input.focus()
        await pilot.press(*"look it up", "enter")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "done" and not main.streaming, 30, "turn 1")
        assert status.prompt_tokens == 1700 and not status.tokens_estimated  # the last request, not 1600 + 1700
        assert status.context_window == 128_000  # litellm's table for a known model
        one_turn = costs[0] + costs[1]  # the turn's two requests
        assert status.session_cost_usd == pytest.approx(one_turn)
        await pilot.pause()
        line = status_line(app)
        assert "last prompt 1,700/128,000 tok ▰▱▱▱▱▱▱▱▱▱" in line and "session cost $" in line

        await pilot.press(*"and again", "enter")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "again" and not main.streaming, 30, "turn 2")
        assert status.prompt_tokens == 1800
        assert status.session_cost_usd == pytest.approx(one_turn + costs[2])

        await pilot.press("ctrl+n")  # a new chat starts from nothing
        await pilot.pause()
        assert status.prompt_tokens is None and status.session_cost_usd is None
        assert "session cost" not in status_line(app) and "last prompt" not in status_line(app)


async def test_context_window_from_config_and_no_gauge_for_an_unknown_model(tmp_path: Path, stub: LlmStub) -> None:
    stub.script(Reply.text_reply("one", usage=(3900, 7)))
    config = make_config(llm_base_url=stub.base_url)  # openai/stub-model: unknown to litellm
    app = make_app(tmp_path, config)
    async with app.run_test(size=(160, 40)) as pilot:
        await started(pilot)
        main = app.main_screen
        assert app.service.model.context_window() is None
        main.chat_input.focus()
        await pilot.press(*"hi", "enter")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "one" and not main.streaming, 30, "turn")
        await pilot.pause()
        line = status_line(app)
        assert "last prompt 3,900 tok" in line and "▰" not in line and "session cost" not in line  # no price
        config.llm.context_window = 4000  # [llm] context_window overrides (litellm does not know this model)
        main.status.context_window = app.service.model.context_window()
        await pilot.pause()
        assert "last prompt 3,900/4,000 tok ▰▰▰▰▰▰▰▰▰▰" in status_line(app)


# --- 9. palette keys, a narrow terminal, [keys] in the inspector detail --------------------------------------


async def test_the_sidebar_steps_aside_on_a_narrow_terminal(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=(80, 30)) as pilot:
        await started(pilot)
        main, slot = app.main_screen, app.main_screen.query_one("#sidebar-slot")
        assert not slot.display and main.chat_input.size.width > 70  # the chat has the width
        await pilot.press("f2")  # still there on demand
        await pilot.pause()
        assert slot.display and main.sidebar.active == "memory"
        # The app hands a resize on to the screen in a message of its own: wait for the screen to act on it (the
        # sidebar is shown already, by F2; and a resize still waiting is replaced by the next one, so the narrow one
        # below must not come before the screen has seen this one).
        await pilot.resize_terminal(140, 30)  # wide again: the sidebar comes back by itself
        await wait_for(pilot, lambda: slot.display and main.panes.narrow is False, 10,
                       "the sidebar back on a wide terminal")
        await pilot.resize_terminal(90, 30)
        await wait_for(pilot, lambda: not slot.display, 10, "the sidebar aside on a narrow terminal")


async def test_the_palette_shows_each_actions_key_with_remaps(tmp_path: Path) -> None:
    config = make_config()
    config.keys = {"toggle_memory": "f10"}
    app = make_app(tmp_path, config)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "CommandPalette", 10, "the palette")
        await pilot.press(*"memory pane")
        await wait_for(pilot, lambda: "Toggle memory pane" in (text := " ".join(screen_text(app).split()))
                       and "(f10)" in text, 10, "the action with its remapped key")


async def test_inspector_detail_honours_keys(tmp_path: Path) -> None:
    config = make_config()
    config.keys = {"detail_expand": "x", "detail_close": "q", "inspector_open": "p"}
    app = make_app(tmp_path, config)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        await pilot.press("f5")
        await wait_for(pilot, lambda: main.inspectors() and main.inspector.entries, 10, "the dry run")
        main.set_focus(main.inspector.assembly_tree)
        await pilot.pause()
        await pilot.press("p")
        detail = await wait_for(pilot, lambda: type(app.screen).__name__ == "InspectorDetailScreen" and app.screen)
        tree = detail.query_one("#detail-tree")
        await pilot.press("x")
        await pilot.pause()
        assert all(node.is_expanded for node in tree.root.children[0].children if node.children)
        await pilot.press("q")
        await wait_for(pilot, lambda: app.screen is main, 5, "q closes the detail")
