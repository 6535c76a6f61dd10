"""A full disk in the TUI (issue #10): a memory save that cannot be persisted is shown as not saved, with the
reason; quitting with an unsaved edit asks first (quit anyway / stay).

The disk is made full with SQLite's own ``max_page_count`` ceiling on the real outbox database (the same
SQLITE_FULL error, on the same path, as a full filesystem: see tests/attacks/test_files_disk.py, which also
runs it on a real tmpfs). The only relay answers queries (so the memory loads) and never answers a publish,
so no relay holds the edit either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bad_inputs_support import NSEC, recording_app
from relay_servers import ScriptedConnection, ScriptedRelay
from tui_support import make_config, make_env, screen_text, started, wait_for

from didactyl_tui.tui.screens.confirm import ConfirmScreen
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen

SIZE = (130, 40)


async def no_ok_relay(conn: ScriptedConnection) -> None:
    """EOSE for every query; no answer to any EVENT (a publish times out)."""
    for _ in range(500):
        msg = await conn.recv()
        if msg[0] == "REQ":
            await conn.send(["EOSE", msg[1]])


def app_with_relay(tmp_path: Path, url: str) -> Any:
    config = make_config(urls=[url], publish_profile=False)
    config.relays.embedded = False
    config.relays.timeout_s = 0.5
    return recording_app(tmp_path, config, make_env(DIDACTYL_NSEC=NSEC))


def fill_the_outbox_disk(app: Any) -> None:
    """From now on the outbox cannot grow: SQLite raises SQLITE_FULL ("database or disk is full")."""
    app.service.parts.runtime.outbox._db.execute("PRAGMA max_page_count=1")  # at least its current size: no growth


async def open_editor(pilot: Any, app: Any) -> MemoryEditorScreen:
    await pilot.press("f6")
    return await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen, 10, "the editor")


async def test_a_save_that_cannot_be_persisted_is_shown_as_not_saved_and_quitting_asks(tmp_path: Path) -> None:
    async with ScriptedRelay(no_ok_relay) as relay:
        await save_on_a_full_disk_then_quit(tmp_path, relay.url)


async def save_on_a_full_disk_then_quit(tmp_path: Path, url: str) -> None:
    app = app_with_relay(tmp_path, url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await started(pilot)
        fill_the_outbox_disk(app)
        editor = await open_editor(pilot, app)
        text = "the user likes tea; " * 200  # ~4,000 characters: the outbox needs new pages for it
        editor.text_area.load_text(text)
        await pilot.press("ctrl+s")
        note = await wait_for(pilot, lambda: app.notified_with("Not saved"), 20, "the not-saved toast")
        result = " ".join(str(editor.query_one("#editor-result").render()).split())
        assert result.startswith("Not saved: disk full: the memory edit could not be written"), result
        assert "No relay took it either" in result
        assert note[0].startswith("Not saved: Not saved: disk full:"), note
        assert "Saved event" not in screen_text(app)
        assert editor.text_area.text == text  # the words stay on screen

        # Quitting would lose the edit: asked first; "Stay" keeps everything.
        await pilot.press("ctrl+q")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, 10, "the question")
        question = str(dialog.query_one("#confirm-question").render())
        assert "Quitting now loses work" in question
        assert "short-term memory" in question and "disk full" in question, question
        dialog.query_one("#cancel").press()  # "Stay" (a click could land on a toast over the dialog)
        await wait_for(pilot, lambda: app.screen is editor, 10, "back to the editor")
        assert app.is_running and editor.text_area.text == text
        assert app.service.documents.at_risk()  # still unsaved: held in memory, retried

        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 10, "the question again")
        app.screen.query_one("#confirm").press()  # "Quit anyway"
        await wait_for(pilot, lambda: not app.is_running, 10, "the app to quit")


async def test_quitting_with_unsaved_editor_text_asks_and_without_it_does_not(tmp_path: Path) -> None:
    async with ScriptedRelay(no_ok_relay) as relay:
        await quit_with_editor_text(tmp_path, relay.url)


async def quit_with_editor_text(tmp_path: Path, url: str) -> None:
    app = app_with_relay(tmp_path, url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await started(pilot)
        editor = await open_editor(pilot, app)
        editor.text_area.load_text("not saved yet")
        await pilot.press("ctrl+q")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, 10, "the question")
        assert "in the editor is not saved" in str(dialog.query_one("#confirm-question").render())
        assert str(dialog.query_one("#cancel").render()).strip() == "Stay"
        await pilot.press("escape")  # Esc stays too
        await wait_for(pilot, lambda: app.screen is editor, 10, "back to the editor")
        editor.text_area.load_text(editor.base.content)  # back to the saved text: nothing to lose
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, 10, "the app to quit without asking")
