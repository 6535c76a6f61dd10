"""One token count: the status bar and the prompt inspector give the same count for the same turn (the model's
count of the turn's last request once it reported one, ours before, marked ~); the memory editor shows the
text's tokens for the model in use, counted off the UI loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply
from tui_support import SIZE, make_app, make_config, started, wait_for

from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.widgets.memory_gauge import MemoryGauge

# This process's model helper is warm before any test's deadline (conftest's warm_litellm).
pytestmark = pytest.mark.usefixtures("warm_litellm")


def status_tokens(app) -> str:
    status = app.main_screen.status
    return f"{'~' if status.tokens_estimated else ''}{status.prompt_tokens:,} tok"


async def test_the_status_bar_and_the_inspector_give_one_count_for_a_turn(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("Hello", usage=(3811, 7)))  # the server counts otherwise than we do
        app = make_app(tmp_path, make_config(llm_base_url=stub.base_url, publish_profile=False))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            await pilot.press("f5")  # a dry run: our count only, marked as ours
            await wait_for(pilot, lambda: main.inspectors() and main.inspector.entries, 10, "the dry run")
            [dry] = main.inspector.entries
            assert status_tokens(app).startswith("~") and status_tokens(app) in dry.label
            main.chat_input.focus()
            await pilot.press(*"hello", "enter")
            await wait_for(pilot, lambda: main.conversation.last_reply() and not main.streaming, 60, "the reply")
            turn = main.inspector.entries[-1]
            await wait_for(pilot, lambda: turn.usage is not None, 10, "the turn's usage")
            assert status_tokens(app) == "3,811 tok" and "· 3,811 tok ·" in turn.label, turn.label
            assert turn.assembly.total_tokens != 3811  # our own count differs: the one shown is the model's


async def test_the_editor_shows_tokens_against_the_models_window(tmp_path: Path) -> None:
    config = make_config(publish_profile=False)
    config.llm.context_window = 128_000
    app = make_app(tmp_path, config)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen, 10)
        gauge = editor.query_one(MemoryGauge)
        await wait_for(pilot, lambda: gauge.tokens == 0, 10, "the empty memory's count")
        editor.text_area.load_text("hello " * 100)
        want, _ = await asyncio.to_thread(app.service.model.count_tokens, "hello " * 100)
        await wait_for(pilot, lambda: gauge.tokens == want and not gauge.tokens_stale, 10,
                       lambda: f"the count {gauge.tokens} (want {want})")
        assert f"{want:,}/128,000 tok" in str(gauge.render())
