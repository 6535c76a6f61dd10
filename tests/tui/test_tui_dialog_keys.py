"""Every dialog is the user's: its keys come from the action table, so ``[keys] close`` and ``confirm`` remap
them in each (the merge view, the diff, unsaved changes, roll back, rename, delete, the model and first-run
dialogs), and its footer shows the keys in force. Also: the palette lists our commands (Textual's own only where
we choose them) and keeps its footer hint when remapped; the focus comes back to the message box when a dialog
closes; a Tab typed in a burst in a dialog is not lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import Clock
from textual import events
from textual.binding import Binding
from tui_support import NOW, SIZE, make_app, make_config, screen_text, started, wait_for

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.tui.commands import DidactylCommands
from didactyl_tui.tui.screens.confirm import ConfirmScreen, UnsavedChangesScreen
from didactyl_tui.tui.screens.diff import DiffScreen
from didactyl_tui.tui.screens.first_run import FirstRunScreen
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.screens.memory_history import MemoryHistoryScreen
from didactyl_tui.tui.screens.merge import MergeScreen
from didactyl_tui.tui.screens.model_switch import ModelSwitchScreen
from didactyl_tui.tui.screens.rename import RenameScreen

KEYS = {"close": "f10", "confirm": "f9"}
ST = DocumentKey.SHORT_TERM


def remapped(model: str = "openai/stub-model"):
    config = make_config(model=model, publish_profile=False)
    config.keys = dict(KEYS)
    return config


def footer(app) -> str:
    return " ".join(screen_text(app).splitlines()[-1].split())


async def closes_with_the_remapped_key(pilot, dialog, *footer_words: str) -> None:
    """The footer names the remapped keys; the default Esc does nothing now; F10 closes the dialog."""
    app = pilot.app
    await wait_for(pilot, lambda: all(word in footer(app) for word in footer_words), 10,
                   lambda: f"{footer_words} in the footer: {footer(app)!r}")
    assert "esc" not in footer(app)
    await pilot.press("escape")
    await pilot.pause()
    assert app.screen is dialog, "Esc still closed it"
    await pilot.press("f10")
    await wait_for(pilot, lambda: app.screen is not dialog, 10, "F10 to close the dialog")


async def two_versions(app, clock: Clock) -> tuple[str, str]:
    first = await app.service.documents.save(ST, "groceries\n")
    clock.t += 10
    second = await app.service.documents.save(ST, "groceries\ncall Ana\n")
    return first.event_id, second.event_id


async def test_the_first_run_dialog(tmp_path: Path) -> None:
    app = make_app(tmp_path, remapped(model=""))
    async with app.run_test(size=SIZE) as pilot:
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen) and app.screen, 10)
        await started(pilot)
        await closes_with_the_remapped_key(pilot, dialog, "f10 Continue without a model", "f9 Set model now")
        assert app.screen is app.main_screen


async def test_the_first_run_dialogs_confirm_key_opens_the_model_dialog(tmp_path: Path) -> None:
    app = make_app(tmp_path, remapped(model=""))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen), 10)
        await started(pilot)
        await pilot.press("f9")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen), 10, "the model dialog")


async def test_the_model_dialog(tmp_path: Path) -> None:
    app = make_app(tmp_path, remapped())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("ctrl+l")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen) and app.screen, 10)
        await closes_with_the_remapped_key(pilot, dialog, "f10 Cancel", "f9 Use this model")
        assert app.screen is app.main_screen and app.service.model.source == "config"  # nothing chosen


async def test_the_rename_dialog_from_the_palette_and_its_confirm_key(tmp_path: Path) -> None:
    app = make_app(tmp_path, remapped())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        main.chat.session_id = await app.service.chat.new_session()
        for close in (True, False):
            await pilot.press("ctrl+p")
            await wait_for(pilot, lambda: "CommandPalette" in type(app.screen).__name__, 10, "the palette")
            await pilot.press(*"rename this chat")
            await wait_for(pilot, lambda: "Rename this chat" in screen_text(app), 10, "the palette's hit")
            await pilot.press("enter")
            dialog = await wait_for(pilot, lambda: isinstance(app.screen, RenameScreen) and app.screen, 10)
            if close:
                await closes_with_the_remapped_key(pilot, dialog, "f10 Cancel", "f9 Rename")
                continue
            dialog.query_one("#chat-title").value = "Groceries"
            await pilot.press("f9")
            await wait_for(pilot, lambda: app.screen is main, 10, "F9 to rename")
            await wait_for(pilot, lambda: any(n.message == "Groceries" for n in app._notifications), 10)
        assert (await app.service.chat.sessions.info(main.chat.session_id)).title == "Groceries"


async def test_the_delete_question(tmp_path: Path) -> None:
    app = make_app(tmp_path, remapped())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        main.chat.session_id = session = await app.service.chat.new_session()
        await main.action_delete_chat()
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, 10)
        await closes_with_the_remapped_key(pilot, dialog, "f10 Cancel", "f9 Confirm")
        assert main.chat.session_id == session  # cancelled: the chat stays


async def test_the_unsaved_changes_question(tmp_path: Path) -> None:
    app = make_app(tmp_path, remapped())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen, 10)
        await pilot.press(*"unsaved words")
        await wait_for(pilot, lambda: editor.unsaved, 10, "the typing")
        await pilot.press("escape")  # the editor's own close key, not remapped
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, UnsavedChangesScreen) and app.screen, 10)
        await closes_with_the_remapped_key(pilot, dialog, "f10 Keep editing", "f9 Save")
        assert app.screen is editor and editor.text_area.text == "unsaved words"  # kept editing


async def test_the_roll_back_question_and_the_diff_in_the_history(tmp_path: Path) -> None:
    clock = Clock(NOW)
    app = make_app(tmp_path, remapped(), clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await two_versions(app, clock)
        app.main_screen.documents.open_history(ST)
        history = await wait_for(pilot, lambda: isinstance(app.screen, MemoryHistoryScreen) and app.screen, 10)
        await wait_for(pilot, lambda: len(history.rows) == 2, 10, "both versions")
        history.table.move_cursor(row=1)  # the older one
        await pilot.press("r")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, 10)
        await closes_with_the_remapped_key(pilot, dialog, "f10 Cancel", "f9 Confirm")
        assert app.screen is history
        await pilot.press("d")
        diff = await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen, 10, "the diff")
        await closes_with_the_remapped_key(pilot, diff, "f10 Close")
        assert "f9" not in footer(app)  # the diff has no main button: its footer offers none
        assert app.screen is history


async def test_the_merge_view(tmp_path: Path) -> None:
    clock = Clock(NOW)
    app = make_app(tmp_path, remapped(), clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        ours, theirs = await two_versions(app, clock)
        service = app.service
        merge = MergeScreen(ST, ours, theirs, service.documents, service.merges, service.model)
        await app.push_screen(merge)
        await wait_for(pilot, lambda: merge.theirs_text is not None, 10, "both versions loaded")
        await closes_with_the_remapped_key(pilot, merge, "f10 Keep theirs", "f9 Save merged")
        assert app.screen is app.main_screen


@pytest.mark.parametrize("key", ["f1", "ctrl+o"])
async def test_the_palette_keeps_its_footer_hint_when_remapped_and_lists_our_commands(tmp_path: Path,
                                                                                      key: str) -> None:
    config = make_config(publish_profile=False)
    config.keys = {"command_palette": key}
    app = make_app(tmp_path, config)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        shown = app.get_key_display(Binding(key, "command_palette"))
        assert f"{shown} Palette" in footer(app), footer(app)
        await pilot.press(key)
        await wait_for(pilot, lambda: "CommandPalette" in type(app.screen).__name__, 10, "the palette")
        titles = [hit.text async for hit in DidactylCommands(app.main_screen).discover()]
        system = [command.title for command in app.get_system_commands(app.main_screen)]
        assert "Theme" not in system and "Quit" not in system and "Screenshot" not in system, system
        assert "Keys" in system
        assert titles.count("Change theme") == 1 and "Quit" in titles


async def test_the_focus_comes_back_to_the_message_box_when_a_dialog_closes(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(publish_profile=False))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        await pilot.press("f5")  # a dry run: the inspector has an entry, its tree can take the focus
        await wait_for(pilot, lambda: main.inspectors() and main.inspector.entries, 10, "the dry run")
        main.set_focus(main.inspector.assembly_tree)
        await wait_for(pilot, lambda: app.focused is main.inspector.assembly_tree, 5)
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen), 10)
        await pilot.press("escape", *"hi")  # typed on straight after the close
        await wait_for(pilot, lambda: app.screen is main, 10)
        await wait_for(pilot, lambda: main.chat_input.text == "hi", 10, lambda: f"{main.chat_input.text!r}")
        assert app.focused is main.chat_input


def burst(app, *keys: str) -> None:
    """Keys as a terminal delivers a burst (a paste, tmux send-keys): all queued before the first is handled."""
    for key in keys:
        app.post_message(events.Key(key, key if len(key) == 1 else "\t" if key == "tab" else None))


async def test_a_tab_typed_in_a_burst_in_the_model_dialog_is_not_lost(tmp_path: Path) -> None:
    config = make_config(publish_profile=False)
    config.llm.api_base = ""
    app = make_app(tmp_path, config)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        # The Tab bubbled up from the field after the letters behind it were typed into that field: they
        # landed in the model name (and the Tab after them). Here every key lands where it was aimed.
        # (Each field takes the whole of its text when the focus reaches it: typing replaces what was there.)
        burst(app, "ctrl+l", *"openai/x", "tab", *"http://h/v1", "tab", *"KEYVAR")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen) and app.screen, 10)
        fields = [dialog.query_one(f"#model-{name}") for name in ("name", "api-base", "key-env")]
        await wait_for(pilot, lambda: fields[2].value == "KEYVAR", 10, lambda: [f.value for f in fields])
        assert [f.value for f in fields] == ["openai/x", "http://h/v1", "KEYVAR"]
