"""Pilot: narrow views say there is more. A dialog taller than the terminal opens at its top (its title, the model in
use), whatever its first focus; the sidebar inspector's lines that do not fit end with an ellipsis and the key that
opens the entry whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from tui_support import make_app, make_config, screen_text, started, wait_for

from didactyl_tui.tui.screens.model_switch import ModelSwitchScreen
from didactyl_tui.tui.widgets.assembly_tree import AssemblyTree


@pytest.mark.parametrize("size", [(130, 40), (110, 30), (100, 24)])
async def test_a_tall_dialog_opens_at_its_top_with_the_first_field_focused(tmp_path: Path,
                                                                           size: tuple[int, int]) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=size) as pilot:
        await started(pilot)
        await pilot.press("ctrl+l")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen) and app.screen, 10)
        box = dialog.query_one("#model-switch")
        await wait_for(pilot, lambda: box.max_scroll_y > 0, 10, "a dialog taller than the terminal")
        await pilot.wait_for_scheduled_animations()
        await wait_for(pilot, lambda: box.scroll_y == 0, 10, lambda: f"the top; scrolled to {box.scroll_y}")
        shown = screen_text(app)
        assert "In use: openai/stub-model" in shown and app.focused is dialog.query_one("#model-name")


async def test_the_sidebar_inspector_ends_a_cut_line_with_an_ellipsis_and_the_open_key(tmp_path: Path) -> None:
    config = make_config()
    config.keys = {"inspector_open": "f12"}  # the hint names the key as it is now
    app = make_app(tmp_path, config)
    async with app.run_test(size=(130, 40)) as pilot:
        await started(pilot)
        main = app.main_screen
        await pilot.press("f4")  # the inspector
        await pilot.press("f5")  # a dry run: an entry in it
        inspector = main.inspector
        await wait_for(pilot, lambda: inspector.entries, 30, "the dry run's entry")
        tree = inspector.query_one(AssemblyTree)
        await wait_for(pilot, lambda: "Policy: admin" in screen_text(app), 10, "the entry on screen")
        lines = [line.rstrip() for line in screen_text(app).splitlines()]
        # Every line of the pane fits it: nothing runs on past its edge unseen (no sideways scroll either).
        assert tree.virtual_size.width <= tree.scrollable_content_region.width and tree.max_scroll_x == 0
        policy = next(line for line in lines if "Policy: admin" in line)
        assert policy.endswith("… (F12)"), policy
        # The open key the hint names shows the entry whole.
        tree.focus()
        await pilot.press("f12")
        await wait_for(pilot, lambda: "the admin's own conversation" in screen_text(app), 10, "the whole line")
