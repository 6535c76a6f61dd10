"""Snapshots (pytest-textual-snapshot) of the main screen, the prompt inspector opened, the memory editor and
the first-run screen: a real AppService with a fixed test key, a fixed clock, UTC, a fixed terminal size, the
embedded relay under a fixed label, and no secret anywhere in the SVG.

Regenerate after checking the picture: ``pytest tests/test_tui_snapshots.py --snapshot-update``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from llm_stub import Reply
from tui_support import TEST_KEY, ThreadedLlmStub, make_app, make_config, started, wait_for

from didactyl_tui.agent import llm
from didactyl_tui.tui.screens.first_run import FirstRunScreen
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen

SIZE = (120, 36)


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch):
    # Times on screen are local: pin the zone so the pictures are the same on every machine.
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(scope="module", autouse=True)
def litellm_loaded() -> None:
    # Token counts are tiktoken's whatever is loaded (agent/tokens.py); litellm is loaded first all the same, so
    # no picture is taken while this process imports it.
    llm.preload()


def steady(run_before):
    """Stop cursors blinking before the picture is taken: a blinking cursor is drawn or not depending on the
    exact moment of the snapshot, which made the main screen flaky under load. Focused cursors stay visible."""

    async def run(pilot) -> None:
        await run_before(pilot)
        for widget in pilot.app.screen.query("TextArea, Input"):
            widget.cursor_blink = False
        await pilot.pause()

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
        await pilot.pause(0.3)

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
        await pilot.pause(0.2)
        main.inspector.assembly_tree.focus()
        await pilot.press("o")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "InspectorDetailScreen", 5)
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=steady(run_before))


def test_memory_editor(snap_compare, tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(publish_profile=False, short_limit=200))

    async def run_before(pilot) -> None:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen, 5)
        editor.text_area.load_text("# About the user\n\n- prefers green tea\n- writes Rust and Python\n")
        editor.text_area.move_cursor((4, 0))
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=steady(run_before))


def test_first_run_screen(snap_compare, tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(model="", publish_profile=False))

    async def run_before(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen), 10)
        await started(pilot)
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=steady(run_before))


def test_no_secret_in_any_snapshot() -> None:
    folder = Path(__file__).parent / "__snapshots__" / "test_tui_snapshots"
    files = sorted(folder.glob("*.svg"))
    assert len(files) == 4
    for svg in files:
        text = svg.read_text()
        assert TEST_KEY.secret_hex() not in text and TEST_KEY.nsec() not in text, svg.name
        assert TEST_KEY.npub[:14] not in text or svg.name != "test_first_run_screen.svg"
        assert "127.0.0.1" not in text, f"{svg.name} shows a relay address with a random port"
