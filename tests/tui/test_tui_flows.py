"""Pilot tests of the TUI's flows against a real AppService: the embedded relay on a free port in a tmp data
dir, and the OpenAI-compatible stub server over real HTTP (through real litellm)."""

from __future__ import annotations

from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply, ToolCall
from tui_support import NOW, TEST_KEY, click, make_app, make_config, screen_text, started, wait_for

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.relay import RelayClient
from didactyl_tui.tui.screens.diff import DiffScreen
from didactyl_tui.tui.screens.main import MainScreen
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.streaming.reply import ReplyPath
from didactyl_tui.tui.widgets.assembly_tree import AssemblyTree
from didactyl_tui.tui.widgets.chat_input import ChatInput
from didactyl_tui.tui.widgets.error_entry import ErrorEntry
from didactyl_tui.tui.widgets.memory_pane import MemoryPane
from didactyl_tui.tui.widgets.message_entry import MessageEntry
from didactyl_tui.tui.widgets.tool_call_entry import ToolCallEntry

SIZE = (130, 40)


# This process's model helper is warm before any test's deadline (conftest's warm_litellm).
pytestmark = pytest.mark.usefixtures("warm_litellm")


def main_of(app) -> MainScreen:
    return app.main_screen


async def type_and_send(pilot, text: str) -> None:
    pilot.app.main_screen.chat_input.focus()
    await pilot.press(*text)
    await pilot.press("enter")


def memory_filter(d: str = "short_term_memory") -> dict:
    return {"kinds": [30078], "authors": [TEST_KEY.public_key_hex], "#d": [d]}


def decrypt_own(content: str) -> str:
    conv = nip44.get_conversation_key(TEST_KEY.secret_hex(), TEST_KEY.public_key_hex)
    return nip44.decrypt(content, conv)


async def relay_memory(url: str, d: str = "short_term_memory") -> list:
    """What the relay holds, read back with a separate client (not the app's pool)."""
    async with RelayClient(url, reconnect=False) as client:
        return await client.query([memory_filter(d)], timeout=3)


# --- conversation ---------------------------------------------------------------------------------


BOTH_PATHS = pytest.mark.parametrize("fast", [True, False], ids=["fast", "public"])  # [ui] fast_streaming


def reply_config(stub: LlmStub, fast: bool):
    config = make_config(llm_base_url=stub.base_url)
    config.ui.fast_streaming = fast
    return config


@BOTH_PATHS
async def test_streamed_reply_with_inline_tool_call_and_live_memory_pane(tmp_path: Path, stub: LlmStub,
                                                                         fast: bool) -> None:
    stub.script(
        Reply.tools(ToolCall("memory_save", '{"type": "short_term", "content": "User likes green tea."}')),
        Reply.text_reply("Noted: you **like green tea**.", chunks=["Noted: ", "you **like ", "green tea**."]),
    )
    app = make_app(tmp_path, reply_config(stub, fast))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = main_of(app)
        assert main.conversation.reply_path is (ReplyPath.FAST if fast else ReplyPath.PUBLIC)
        await type_and_send(pilot, "remember I like green tea")
        await wait_for(pilot, lambda: not main.streaming and main.conversation.last_reply(), 30, "the reply")

        entries = list(main.conversation.query(MessageEntry))
        assert [e.role for e in entries] == ["user", "assistant"]
        assert entries[0].text == "remember I like green tea"
        assert entries[1].text == "Noted: you **like green tea**."
        # Streamed into the Markdown widget (rendered: the asterisks are gone).
        await wait_for(pilot, lambda: "Noted: you like green tea." in screen_text(app), 10, "the rendered reply")

        # The tool call sits inline, collapsed, between the message and the reply; it expands to args + result.
        (call,) = main.conversation.query(ToolCallEntry)
        assert call.tool_name == "memory_save" and call.collapsed and call.ending == "done"
        assert call.arguments == {"type": "short_term", "content": "User likes green tea."}
        assert call.result is not None and "accepted_by" in call.result
        children = list(main.conversation.children)
        assert children.index(entries[0]) < children.index(call) < children.index(entries[1])
        call.collapsed = False
        await wait_for(pilot, lambda: all(t in screen_text(app) for t in ("arguments", "User likes green tea.",
                                                                         "accepted_by")), 10, "the call expanded")

        # The short-term pane changed the moment memory_save ran.
        pane = main.query_one("#short-term", MemoryPane)
        assert pane.snapshot is not None and pane.snapshot.content == "User likes green tea."
        assert "User likes green tea." in screen_text(app)

        # The inspector got the turn's assembly, with the reply and the tool round attached.
        entry = main.inspector.entries[-1]
        assert not entry.assembly.dry_run and entry.reply == "Noted: you **like green tea**."
        assert [c.name for c in entry.tool_calls] == ["memory_save"]
        assert main.status.prompt_tokens is not None and main.status.tokens_estimated is False
        assert len(stub.requests) == 2


async def test_llm_error_is_inline_input_restored_and_retry_works(tmp_path: Path, stub: LlmStub) -> None:
    stub.script(Reply.server_error())
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = main_of(app)
        await type_and_send(pilot, "hello there")
        error = await wait_for(pilot, lambda: next(iter(main.conversation.query(ErrorEntry)), None), 30, "error")
        await wait_for(pilot, lambda: not main.streaming, 10, "the turn to end")
        # The user's words came back into the input; the failed message is marked, not lost.
        assert main.chat_input.text == "hello there"
        assert error.retry_text == "hello there"
        assert "-failed" in main.conversation.query(MessageEntry).first().classes
        assert main.inspector.entries[-1].failure is not None

        # Retry re-sends the same text; the error and the failed attempt go away.
        stub.script(Reply.text_reply("Hi!"))
        await click(pilot, error.query_one("#retry"))
        await wait_for(pilot, lambda: main.conversation.last_reply() == "Hi!" and not main.streaming, 30, "retry")
        assert not list(main.conversation.query(ErrorEntry))
        assert [e.text for e in main.conversation.query(MessageEntry)] == ["hello there", "Hi!"]
        assert main.chat_input.text == ""  # the restored copy was consumed by the retry



async def test_retry_while_another_reply_streams_keeps_the_failed_turn_and_works_after(tmp_path: Path,
                                                                                       stub: LlmStub) -> None:
    words = [f"word{i} " for i in range(40)]
    stub.script(Reply.server_error(), Reply.text_reply("".join(words), chunks=words, chunk_delay_s=0.1))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = main_of(app)
        await type_and_send(pilot, "first")
        error = await wait_for(pilot, lambda: next(iter(main.conversation.query(ErrorEntry)), None), 30, "error")
        await wait_for(pilot, lambda: not main.streaming, 10, "the turn to end")
        main.chat_input.clear()
        await type_and_send(pilot, "second")
        await wait_for(pilot, lambda: "word2" in (main.conversation.last_reply() or ""), 30, "streaming")
        # Retry while a reply is written: refused as busy, and the failed turn stays with its Retry.
        await click(pilot, error.query_one("#retry"))
        assert error.is_attached and main.conversation.query(MessageEntry).first().text == "first"
        assert any("still being written" in str(n.message) for n in app._notifications)
        await wait_for(pilot, lambda: not main.streaming, 30, "the second reply")
        stub.script(Reply.text_reply("Hi!"))
        await click(pilot, error.query_one("#retry"))
        await wait_for(pilot, lambda: main.conversation.last_reply() == "Hi!" and not main.streaming, 30, "retry")
        assert not list(main.conversation.query(ErrorEntry))
        assert [e.text for e in main.conversation.query(MessageEntry)][-2:] == ["first", "Hi!"]


@BOTH_PATHS
async def test_escape_cancels_a_streaming_reply(tmp_path: Path, stub: LlmStub, fast: bool) -> None:
    words = [f"word{i} " for i in range(200)]
    stub.script(Reply.text_reply("".join(words), chunks=words, chunk_delay_s=0.05))
    app = make_app(tmp_path, reply_config(stub, fast))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = main_of(app)
        await type_and_send(pilot, "talk a lot")
        await wait_for(pilot, lambda: "word3" in (main.conversation.last_reply() or ""), 30, "streaming to start")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not main.streaming, 10, "the cancel")
        reply = main.conversation.last_reply() or ""
        assert reply.endswith("*(cancelled)*") and "word199" not in reply
        await wait_for(pilot, lambda: "(cancelled)" in screen_text(app), 10, "the note on screen")


@BOTH_PATHS
async def test_the_whole_reply_is_on_screen_when_the_model_says_it_is_done(tmp_path: Path, stub: LlmStub,
                                                                            fast: bool) -> None:
    """The last words are painted when the model's finish chunk comes, not once its stream has closed and the turn is
    kept (the stub holds the usage chunk and [DONE] back); the turn's end then adds nothing (no second reply)."""
    words = [f"word{i} " for i in range(120)]
    stub.script(Reply.text_reply("".join(words), chunks=words, end_pause_s=3.0))
    app = make_app(tmp_path, reply_config(stub, fast))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = main_of(app)
        await type_and_send(pilot, "talk")
        whole = "".join(words).strip()

        def shown_whole() -> bool:
            entries = [e for e in main.conversation.query(MessageEntry) if e.role == "assistant"]
            return bool(entries) and entries[-1].finished and entries[-1].painted_text.strip() == whole

        await wait_for(pilot, shown_whole, 30, "the whole reply painted")
        assert main.streaming and stub.open_streams == 1  # the stream has not closed: the turn goes on
        await wait_for(pilot, lambda: not main.streaming, 30, "the turn's end")
        replies = [e.text.strip() for e in main.conversation.query(MessageEntry) if e.role == "assistant"]
        assert replies == [whole]


async def test_input_newline_and_history(tmp_path: Path, stub: LlmStub) -> None:
    stub.script(Reply.text_reply("one"), Reply.text_reply("two"))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = main_of(app)
        box = main.query_one(ChatInput)
        box.focus()
        await pilot.press("a", "ctrl+j", "b")
        assert box.text == "a\nb"  # a newline key, not a send
        await pilot.press("enter")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "one" and not main.streaming, 30)
        await type_and_send(pilot, "second")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "two" and not main.streaming, 30)
        box.focus()
        await pilot.press("up")
        assert box.text == "second"
        await pilot.press("up")
        assert box.text == "a\nb" and box.cursor_location == (1, 1)
        await pilot.press("up")  # inside a multi-line entry, up moves the cursor first
        assert box.text == "a\nb" and box.cursor_location[0] == 0
        await pilot.press("down", "down")  # to its last line, then on to the newer entry
        assert box.text == "second"
        await pilot.press("down")
        assert box.text == ""
        assert stub.requests[0].messages[-1] == {"role": "user", "content": "a\nb"}


async def test_new_chat_and_resume_a_past_chat(tmp_path: Path, stub: LlmStub) -> None:
    stub.script(Reply.text_reply("first answer"))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = main_of(app)
        await type_and_send(pilot, "first question")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "first answer" and not main.streaming, 30)
        old_session = main.chat.session_id
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert main.chat.session_id is None and not list(main.conversation.query(MessageEntry))
        main.saved_chats.resume(old_session)
        await wait_for(pilot, lambda: main.conversation.last_reply() == "first answer", 10, "the resumed chat")
        assert [e.text for e in main.conversation.query(MessageEntry)] == ["first question", "first answer"]
        assert main.chat.session_id == old_session


# --- memory editor --------------------------------------------------------------------------------


async def test_editor_save_lands_on_the_relay_with_verdicts(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
        editor.text_area.load_text("# Facts\n- the user writes Rust")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "accepted by 1/1 relays" in screen_text(app), 10, "the save's verdicts")

        url = app.service.relays.embedded_url
        events = await relay_memory(url)
        assert [decrypt_own(ev.content) for ev in events] == ["# Facts\n- the user writes Rust"]
        assert events[0].id == app.service.documents.snapshot(DocumentKey.SHORT_TERM).event_id

        await pilot.press("escape")
        await pilot.pause()
        pane = app.main_screen.query_one("#short-term", MemoryPane)
        assert pane.snapshot.content == "# Facts\n- the user writes Rust"


async def test_editor_refuses_an_over_limit_save_and_keeps_the_text(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(short_limit=20))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
        too_long = "x" * 25
        editor.text_area.load_text(too_long)
        await pilot.pause()
        assert "-over" in editor.query_one("#editor-gauge").classes
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "Not saved" in screen_text(app), 10, "the refusal")
        assert editor.text_area.text == too_long
        assert "the limit is 20" in " ".join(screen_text(app).split())
        assert await relay_memory(app.service.relays.embedded_url) == []  # nothing was published
        assert app.service.documents.snapshot(DocumentKey.SHORT_TERM).content == ""


async def _publish_from_other_device(url: str, text: str, created_at: int) -> str:
    conv = nip44.get_conversation_key(TEST_KEY.secret_hex(), TEST_KEY.public_key_hex)
    ev = sign_event(TEST_KEY, kind=30078, content=nip44.encrypt(text, conv), created_at=created_at,
                    tags=[["d", "short_term_memory"], ["app", "didactyl"]])
    async with RelayClient(url, reconnect=False) as client:
        verdict = await client.publish(ev, timeout=3)
    assert verdict.accepted, verdict
    return ev.id


async def test_editor_conflict_never_overwrites_silently(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
        editor.text_area.load_text("mine")
        url = app.service.relays.embedded_url
        # Dated 3 s ahead of this (frozen) clock: our overwrite can still be dated after it within the 5 s bound.
        theirs_id = await _publish_from_other_device(url, "theirs", int(NOW) + 3)

        await wait_for(pilot, lambda: editor.theirs is not None, 10, "the conflict to show")
        await pilot.pause()
        assert editor.query_one("#editor-conflict").display
        assert "A newer version arrived" in screen_text(app)

        # Save is refused while the conflict stands: the relay still holds theirs.
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "Not saved: a newer version arrived" in screen_text(app), 10, "the refusal")
        assert [ev.id for ev in await relay_memory(url)] == [theirs_id]

        # The difference can be viewed.
        await click(pilot, "#view-diff")
        diff = await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen)
        text = screen_text(app)
        assert "-theirs" in text and "+mine" in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is editor)
        assert diff is not None

        # Overwrite is an explicit choice: it publishes mine as the newest version.
        await click(pilot, "#overwrite")
        await wait_for(pilot, lambda: "accepted by 1/1" in screen_text(app), 10, "the overwrite")
        events = await relay_memory(url)
        assert [decrypt_own(ev.content) for ev in events] == ["mine"]
        assert int(NOW) + 3 < events[0].created_at <= int(NOW) + 5


async def test_editor_conflict_keep_theirs(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
        editor.text_area.load_text("mine")
        url = app.service.relays.embedded_url
        theirs_id = await _publish_from_other_device(url, "theirs", int(NOW) + 10)
        await wait_for(pilot, lambda: editor.theirs is not None, 10, "the conflict to show")
        await pilot.pause()
        await click(pilot, "#keep-theirs")
        await pilot.pause()
        assert editor.text_area.text == "theirs" and editor.theirs is None
        assert editor.base.event_id == theirs_id
        await pilot.press("escape")  # cancel: nothing published
        await pilot.pause()
        assert [ev.id for ev in await relay_memory(url)] == [theirs_id]


# --- inspector ----------------------------------------------------------------------------------------


async def test_dry_run_shows_in_the_inspector_without_calling_the_model(tmp_path: Path, stub: LlmStub) -> None:
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = main_of(app)
        main.chat_input.focus()
        await pilot.press(*"what would you see?")
        await pilot.press("f5")
        entry = await wait_for(pilot, lambda: main.inspector.entries and main.inspector.entries[-1], 10, "dry run")
        assert entry.assembly.dry_run and entry.assembly.user_message == "what would you see?"
        assert stub.requests == []  # the model was not called
        assert main.chat_input.text == "what would you see?"  # the draft stays
        assert main.query_one("#sidebar").active == "inspector"
        await pilot.pause()
        text = screen_text(app)
        assert "#1 dry run" in text and "Sections:" in text and "Tools offered:" in text

        # Open it full-screen, then the dry run from there adds a second entry; diff the two.
        await pilot.press("f5")
        await wait_for(pilot, lambda: len(main.inspector.entries) == 2, 10, "second dry run")
        # The newest entry takes the cursor once the tree has laid it out (after a refresh): "o" opens that one.
        tree_of = main.inspector.assembly_tree
        await wait_for(pilot, lambda: tree_of.entry_at_cursor() is main.inspector.entries[-1], 10, "the cursor on it")
        main.inspector.assembly_tree.focus()
        await pilot.press("o")
        detail = await wait_for(pilot, lambda: type(app.screen).__name__ == "InspectorDetailScreen" and app.screen)
        tree = detail.query_one(AssemblyTree)
        labels = [str(n.label) for n in tree.root.children[0].children]
        assert any(label.startswith("Sections:") for label in labels)
        assert any(label.startswith("Totals:") for label in labels)
        assert detail.entry.number == 2 and detail.previous is not None
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen), 5, f"diff {app.screen} {app._notifications}")
        await pilot.press("escape")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is main)
