"""Pilot: chat management as oterm/Elia users expect it: regenerate the last reply, edit and resend the last
message, copy any message, rename, delete; a failed turn's message stays (marked) and the chat is listed by
it; a resumed chat brings its prompt assemblies back to the inspector."""

from __future__ import annotations

from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply
from tui_support import SIZE, click, make_app, make_config, started, wait_for

from didactyl_tui.tui.screens.confirm import ConfirmScreen
from didactyl_tui.tui.screens.rename import RenameScreen
from didactyl_tui.tui.widgets.message_entry import MessageEntry


def highlighted_hit(app) -> str:
    """The command palette's highlighted hit, as text ("" while it has none)."""
    from textual.command import CommandList

    lists = app.screen.query(CommandList)
    if not lists or lists.first().highlighted is None:
        return ""
    return str(lists.first().get_option_at_index(lists.first().highlighted).prompt)


# This process's model helper is warm before any test's deadline (conftest's warm_litellm).
pytestmark = pytest.mark.usefixtures("warm_litellm")


async def send(pilot, text: str) -> None:
    main = pilot.app.main_screen
    main.chat_input.focus()
    await pilot.press(*text, "enter")


def texts(main) -> list[str]:
    return [e.text for e in main.conversation.query(MessageEntry)]


async def settled(pilot, expected: list[str]) -> None:
    main = pilot.app.main_screen
    await wait_for(pilot, lambda: texts(main) == expected and not main.streaming, 30, lambda: f"{texts(main)}")


async def test_regenerate_edit_and_resend_copy_rename_delete(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("one"), Reply.text_reply("two"), Reply.text_reply("three"))
        app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            await send(pilot, "hello")
            await settled(pilot, ["hello", "one"])
            await pilot.press("ctrl+g")  # regenerate: the same message asked again, the old reply replaced
            await settled(pilot, ["hello", "two"])
            assert [m["content"] for m in stub.requests[1].messages if m["role"] == "user"] == ["hello"]
            session = main.chat.session_id
            assert [m["content"] for m in await app.service.chat.session_messages(session)] == ["hello", "two"]

            main.action_edit_last()  # the last message back in the box, its turn taken out of the chat
            await wait_for(pilot, lambda: main.chat_input.text == "hello", 10, "the message back in the box")
            assert texts(main) == [] and await app.service.chat.session_messages(session) == []
            await pilot.press("end", *" again", "enter")
            await settled(pilot, ["hello again", "three"])

            main.action_copy_message()
            await wait_for(pilot, lambda: app.screen.id == "--command-palette" or "Command" in type(app.screen)
                           .__name__, 10, "the message list")
            await pilot.press(*"hello again")
            await wait_for(pilot, lambda: "hello again" in highlighted_hit(app), 10, "the message highlighted")
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.clipboard == "hello again", 10, "the copy")

            await main.action_rename_chat()
            dialog = await wait_for(pilot, lambda: isinstance(app.screen, RenameScreen) and app.screen)
            dialog.query_one("#chat-title").value = ""
            await pilot.press(*"Greetings", "enter")
            await wait_for(pilot, lambda: not isinstance(app.screen, RenameScreen))
            await wait_for(pilot, lambda: not [w for w in main.workers if w.group == "chat-manage"], 10, "the rename")
            assert (await app.service.chat.sessions.info(session)).title == "Greetings"

            await main.action_delete_chat()
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await click(pilot, "#confirm")
            await wait_for(pilot, lambda: main.chat.session_id is None, 10, "the chat to go")
            assert await app.service.chat.sessions.list() == [] and texts(main) == []


async def test_a_failed_turn_stays_marked_and_comes_back_with_its_assemblies(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("fine"), Reply.error(400, "the stub refuses this one"))
        app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            await send(pilot, "works")
            await settled(pilot, ["works", "fine"])
            await send(pilot, "fails")
            await wait_for(pilot, lambda: "-failed" in main.conversation.query(MessageEntry)[-1].classes, 30)
            session = main.chat.session_id
            [listed] = await app.service.chat.sessions.list()
            assert listed.title == "works" and listed.message_count == 3
            inspector = main.inspector
            await wait_for(pilot, lambda: len(inspector.entries) == 2, 10, "the inspector's entries")

            await pilot.press("ctrl+n")
            await pilot.pause()
            main.saved_chats.resume(session)
            await settled(pilot, ["works", "fine", "fails"])
            failed = main.conversation.query(MessageEntry)[-1]
            assert "-failed" in failed.classes and "failed: not answered" in str(failed.border_subtitle)
            # The inspector shows the chat's own assemblies again: the answered turn and the failed one.
            await wait_for(pilot, lambda: [e.assembly.user_message for e in inspector.entries] == ["works", "fails"],
                           10, "the restored assemblies")
            assert inspector.entries[0].reply == "fine" and inspector.entries[1].failure


async def test_a_cancelled_reply_keeps_the_message_marked_cancelled(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.hang(30))
        app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            await send(pilot, "too slow")
            await wait_for(pilot, lambda: main.streaming and stub.requests, 30, "the request")
            await pilot.press("escape")
            entry = main.conversation.query(MessageEntry)[0]
            await wait_for(pilot, lambda: "cancelled" in str(entry.border_subtitle), 10, "the mark")
            await app.service.parts.chat.settle()
            assert await app.service.chat.session_messages(main.chat.session_id) == [
                {"role": "user", "content": "too slow", "status": "cancelled"}]
