"""Pilot: what the screen shows of a turn is what a resume shows, and nothing the person did is lost on quit: each
tool call as it ended (error, done, refused); a reply cancelled part way, its part so far marked, live and after a
resume; Ctrl+Q while a reply streams asks (quit, keeping the reply so far, or wait for it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply, ToolCall
from tui_support import SIZE, make_app, make_config, screen_text, started, wait_for

from didactyl_tui.agent.conversations.store import ConversationStore
from didactyl_tui.service.sessions import CONVERSATIONS_DB
from didactyl_tui.tui.screens.confirm import ConfirmScreen
from didactyl_tui.tui.widgets.message_entry import MessageEntry
from didactyl_tui.tui.widgets.tool_call_entry import ToolCallEntry

pytestmark = pytest.mark.usefixtures("warm_litellm")

BAD_SAVE = json.dumps({"type": "nonsense", "content": "x"})
GOOD_SAVE = json.dumps({"type": "short_term", "content": "Ada likes tea."})


async def send(pilot, text: str) -> None:
    pilot.app.main_screen.chat_input.focus()
    await pilot.press(*text, "enter")


def endings(main) -> list[tuple[str, str]]:
    return [(e.call_id, e.ending) for e in main.conversation.query(ToolCallEntry)]


async def resume(pilot, session: str, entries: int) -> None:
    main = pilot.app.main_screen
    await pilot.press("ctrl+n")
    await wait_for(pilot, lambda: main.chat.session_id is None and not main.conversation.query(MessageEntry), 10,
                   "a new chat")
    main.saved_chats.resume(session)
    await wait_for(pilot, lambda: len(main.conversation.query(MessageEntry)) == entries, 30, "the resumed chat")


async def test_each_tool_call_shows_as_it_ended_live_and_after_a_resume(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.tools(ToolCall("memory_save", BAD_SAVE, id="bad"),
                                ToolCall("memory_save", GOOD_SAVE, id="good"),
                                ToolCall("memory_save", GOOD_SAVE, id="over")),
                    Reply.text_reply("Saved once."))
        config = make_config(llm_base_url=stub.base_url)
        config.llm.max_tool_calls_per_turn = 2  # the third call is refused, never run
        app = make_app(tmp_path, config)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            await send(pilot, "remember")
            await wait_for(pilot, lambda: not main.streaming and main.conversation.last_reply(), 30, "the reply")
            expected = [("bad", "error"), ("good", "done"), ("over", "refused")]
            assert endings(main) == expected
            await wait_for(pilot, lambda: "memory_save · error" in screen_text(app), 10, "the failed call")
            assert "memory_save · refused" in screen_text(app)

            await resume(pilot, main.chat.session_id, 2)
            await wait_for(pilot, lambda: len(endings(main)) == 3, 10, "the resumed calls")
            assert endings(main) == expected
            await wait_for(pilot, lambda: "memory_save · error" in screen_text(app), 10, "the failed call, resumed")
            assert "memory_save · refused" in screen_text(app) and "memory_save · done" in screen_text(app)


async def test_a_cancelled_reply_shows_its_part_so_far_marked_live_and_after_a_resume(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("Half of the answer and the rest", pauses={3: 60.0}))
        app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            await send(pilot, "go")
            await wait_for(pilot, lambda: "answer" in (main.conversation.last_reply() or ""), 30, "part of a reply")
            await pilot.press("escape")
            asked, reply = main.conversation.query(MessageEntry)
            await wait_for(pilot, lambda: "cancelled: answered in part" in str(asked.border_subtitle), 10, "the mark")
            assert reply.text == "Half of the answer\n\n*(cancelled)*"
            await app.service.parts.chat.settle()

            await resume(pilot, main.chat.session_id, 2)
            asked, reply = main.conversation.query(MessageEntry)
            assert (asked.text, reply.text) == ("go", "Half of the answer\n\n*(cancelled)*")
            assert "-failed" in asked.classes and str(asked.border_subtitle) == "cancelled: answered in part"
            await wait_for(pilot, lambda: "(cancelled)" in screen_text(app), 10, "the note on screen")


async def test_quitting_while_a_reply_streams_asks_and_keeps_the_reply_so_far(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("Half of the answer and the rest", pauses={3: 60.0}))
        app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            await send(pilot, "go")
            await wait_for(pilot, lambda: "answer" in (main.conversation.last_reply() or ""), 30, "part of a reply")
            session = main.chat.session_id
            await pilot.press("ctrl+q")
            dialog = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, 10, "asked")
            assert "A reply is being written" in screen_text(app) and "Wait for the reply" in screen_text(app)
            await pilot.press("escape")  # wait for the reply: nothing stops
            await wait_for(pilot, lambda: app.screen is main, 10, "the question closed")
            assert main.streaming and app.is_running
            await pilot.press("ctrl+q")
            dialog = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, 10, "asked")
            dialog.query_one("#confirm").press()  # quit now
            await wait_for(pilot, lambda: not app.is_running, 30, "the app to quit")
        store = ConversationStore(tmp_path / CONVERSATIONS_DB)
        try:
            assert store.messages(session) == [
                {"role": "user", "content": "go", "status": "cancelled"},
                {"role": "assistant", "content": "Half of the answer", "status": "cancelled"}]
        finally:
            store.close()
