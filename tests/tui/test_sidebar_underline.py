"""The sidebar's tab underline ends under the active tab, whatever the order of the layout passes and of Textual's
own placing (tests/tui/test_tui_snapshots.py's first-run picture once had it one column wide, under load)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Tabs
from tui_support import make_app, make_config, started, wait_for


def span(tabs: Tabs) -> tuple[int, int]:
    tab = tabs.active_tab
    assert tab is not None
    return tab.virtual_region.shrink(tab.styles.gutter).column_span


async def test_an_underline_sliding_to_an_old_place_ends_under_the_tab_as_it_is_now(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(publish_profile=False))
    async with app.run_test(size=(120, 36)) as pilot:
        await started(pilot)
        tabs = app.main_screen.sidebar.query_one(Tabs)
        underline = tabs.query_one("Underline")
        await wait_for(pilot, lambda: (underline.highlight_start, underline.highlight_end) == span(tabs), 10,
                       "the underline under the active tab")
        # As the first layout passes of the tabs did: an animation towards where the tab was, one column wide ...
        start = span(tabs)[0]
        underline.animate("highlight_start", start, duration=30, level="none")
        underline.animate("highlight_end", start, duration=30, level="none")
        # ... and then the tab took its place (here: moved right by a margin) in a pass that resized no tabs.
        tabs.active_tab.styles.margin = (0, 0, 0, 5)
        await wait_for(pilot, lambda: span(tabs)[0] >= start + 5, 10, "the tab moved")
        await wait_for(pilot, lambda: (underline.highlight_start, underline.highlight_end) == span(tabs), 10,
                       lambda: f"the underline under the tab at {span(tabs)}, not at "
                               f"{(underline.highlight_start, underline.highlight_end)}")
        assert not app.animator.is_being_animated(underline, "highlight_end")
