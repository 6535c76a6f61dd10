"""Snapshots (pytest-textual-snapshot) of the main screen, the prompt inspector opened, the memory editor, the
first-run screen and the first run's question of where the agent's key lives: a real AppService with a fixed test
key, a fixed clock, UTC, a fixed terminal size, the embedded relay under a fixed label, and no secret anywhere in
the SVG.

Regenerate after checking the picture: ``pytest tests/tui/test_tui_snapshots.py --snapshot-update``."""

from __future__ import annotations

from pathlib import Path

import pytest
from llm_stub import Reply
from tui_support import TEST_KEY, ThreadedLlmStub, make_app, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.tui.screens.first_run import FirstRunScreen
from didactyl_tui.tui.screens.key_place import KeyPlaceScreen
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen

SIZE = (120, 36)


# Times on screen are local: the zone is pinned (conftest's utc) so the pictures are the same on every machine.
pytestmark = pytest.mark.usefixtures("utc")


def underline_placed(app) -> bool:
    """The sidebar's tab underline sits under the active tab. Textual places it after a refresh that, under
    load, came before the tabs were laid out (the first-run picture then had it at zero width)."""
    sidebar = app.main_screen.sidebar
    tab = sidebar.get_tab(sidebar.active)
    underline = sidebar.query_one("Underline")
    placed = (underline.highlight_start, underline.highlight_end)
    return bool(tab.region) and placed == tab.virtual_region.shrink(tab.styles.gutter).column_span


def underline_state(app) -> str:
    """What the underline wait saw, for its failure message."""
    sidebar = app.main_screen.sidebar
    tab = sidebar.get_tab(sidebar.active)
    underline = sidebar.query_one("Underline")
    return (f"tab at {tab.region}, wanted {tab.virtual_region.shrink(tab.styles.gutter).column_span}, underline at "
            f"{(underline.highlight_start, underline.highlight_end)}, on top {type(app.screen).__name__}")


async def showing(pilot, *texts: str) -> None:
    """Wait until every one of ``texts`` is on screen (what the picture is taken for has been drawn)."""
    await wait_for(pilot, lambda: all(text in screen_text(pilot.app) for text in texts), 15,
                   lambda: f"{texts} on screen:\n{screen_text(pilot.app)}")


def steady(run_before):
    """Wait for the facts every picture shows (the sidebar's tabs placed), and stop cursors blinking: a
    blinking cursor is drawn or not depending on the exact moment of the snapshot, which made the main screen
    flaky under load. Focused cursors stay visible."""

    async def run(pilot) -> None:
        await run_before(pilot)
        await wait_for(pilot, lambda: underline_placed(pilot.app), 10,
                       lambda: f"the tab underline under the active tab ({underline_state(pilot.app)})")
        for screen in pilot.app.screen_stack:  # a dialog's picture shows the screen below it too
            for widget in screen.query("TextArea, Input"):
                widget.cursor_blink = False
        await pilot.wait_for_scheduled_animations()  # the cursor lines repainted without the blink

    return run


@pytest.fixture
def stub(warm_litellm: None):
    with ThreadedLlmStub() as server:
        yield server


def test_main_screen(snap_compare, tmp_path: Path, stub) -> None:
    stub.script(Reply.text_reply(
        "Hello! I keep **short-term memory** on Nostr.\n\n- it is encrypted to myself\n- it lives on relays",
        chunks=["Hello! I keep ", "**short-term memory** on Nostr.\n\n", "- it is encrypted to myself\n",
                "- it lives on relays"]))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url, publish_profile=False))

    async def run_before(pilot) -> None:
        await started(pilot)
        main = app.main_screen
        main.chat_input.focus()
        await pilot.press(*"hello, who are you?", "enter")
        await wait_for(pilot, lambda: main.conversation.last_reply() and not main.streaming, 30, "the reply")
        await showing(pilot, "it lives on relays", "last prompt 11 tok", "relays 1/1", "0 publishes pending")

    assert snap_compare(app, terminal_size=SIZE, run_before=steady(run_before))


def test_inspector_opened(snap_compare, tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(publish_profile=False))

    async def run_before(pilot) -> None:
        await started(pilot)
        main = app.main_screen
        main.chat_input.focus()
        await pilot.press(*"what do you know about me?")
        await pilot.press("f5")
        await wait_for(pilot, lambda: main.inspector.entries, 10, "the dry run")
        main.inspector.assembly_tree.focus()
        await pilot.press("o")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "InspectorDetailScreen", 5)
        await showing(pilot, "Tools offered: 22", "my_notes")

    assert snap_compare(app, terminal_size=SIZE, run_before=steady(run_before))


def test_memory_editor(snap_compare, tmp_path: Path, warm_litellm: None) -> None:
    app = make_app(tmp_path, make_config(publish_profile=False, short_limit=200))

    async def run_before(pilot) -> None:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen, 5)
        # No blink before the text is drawn: TextArea caches a line drawn in the blink's hidden phase under the
        # same key as a steady cursor's, so stopping the blink later left the cursor drawn or not by chance.
        editor.text_area.cursor_blink = False
        editor.text_area.load_text("# About the user\n\n- prefers green tea\n- writes Rust and Python\n")
        editor.text_area.move_cursor((4, 0))
        await wait_for(pilot, lambda: editor.text_area.has_focus, 10, "the editor's focus (its cursor is drawn)")
        # Counted off the loop by the model helper (warm_litellm: running, as in an app where a key was typed; with
        # no helper the gauge shows the estimate, "~16 tok", and this picture would be another).
        await showing(pilot, "63/200 chars · 16 tok", "writes Rust and Python")

    assert snap_compare(app, terminal_size=SIZE, run_before=steady(run_before))


def test_first_run_screen(snap_compare, tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(model="", publish_profile=False))

    async def run_before(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen), 10)
        await started(pilot)
        await showing(pilot, "then the config file.", "relays 1/1", "0 publishes pending")

    assert snap_compare(app, terminal_size=SIZE, run_before=steady(run_before))


def test_where_the_key_lives_question(snap_compare) -> None:
    # Shown before the service starts (it makes nothing until answered): a data dir that is never created, so the
    # path on screen is the same on every run.
    data = Path("/nonexistent-didactyl-snapshot/data")
    env = make_env(XDG_CONFIG_HOME="/nonexistent-didactyl-snapshot/config")
    del env["DIDACTYL_NSEC"]
    app = make_app(data, make_config(publish_profile=False), env=env)

    async def run_before(pilot) -> None:
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, KeyPlaceScreen) and app.screen, 10)
        await wait_for(pilot, lambda: app.focused is dialog.query_one("#create-key"), 10, "the default's focus")
        await showing(pilot, "Where does the agent's key live?", "Create a key here")
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
    assert not data.parent.exists()


def test_no_secret_in_any_snapshot() -> None:
    folder = Path(__file__).parent / "__snapshots__" / "test_tui_snapshots"
    files = sorted(folder.glob("*.svg"))
    assert len(files) == 5
    for svg in files:
        text = svg.read_text()
        assert TEST_KEY.secret_hex() not in text and TEST_KEY.nsec() not in text, svg.name
        assert TEST_KEY.npub[:14] not in text or svg.name != "test_first_run_screen.svg"
        assert "127.0.0.1" not in text, f"{svg.name} shows a relay address with a random port"
