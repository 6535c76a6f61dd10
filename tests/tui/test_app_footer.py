"""The main screen's footer (tui/widgets/app_footer.py): each key of a rebuild is styled once, as it mounts, with the
footer's ``compact`` already (Textual's keys start compact: each was restyled twice more, 11.5 ms of the UI loop a
reply), and shows it."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.dom import DOMNode
from textual.widget import Widget
from tui_support import wait_for

from didactyl_tui.tui.widgets.app_footer import AppFooter


class Keys(App[None]):
    BINDINGS = [("a", "notify('a')", "Alpha"), ("b", "notify('b')", "Beta"), ("c", "notify('c')", "Gamma")]

    def __init__(self, compact: bool) -> None:
        super().__init__()
        self.compact = compact
        self.restyled: list[DOMNode] = []

    def compose(self) -> ComposeResult:
        yield AppFooter(compact=self.compact)

    def update_styles(self, node: DOMNode, animate: bool = True) -> None:
        self.restyled.append(node)
        super().update_styles(node, animate)


@pytest.mark.parametrize("compact", [False, True])
async def test_a_rebuilt_footer_styles_each_key_once_with_the_footers_compact(compact: bool) -> None:
    app = Keys(compact)
    async with app.run_test() as pilot:
        footer = app.query_one(AppFooter)
        await pilot.pause()
        app.restyled.clear()
        before = set(footer.query("FooterKey"))
        app.refresh_bindings()  # as when a turn starts or ends: the footer builds its keys anew (after a refresh)

        def rebuilt() -> list[Widget]:  # the three, and the command palette's (always compact, as Textual has it)
            keys = list(footer.query("FooterKey"))
            return keys if len(keys) == 4 and not before & set(keys) and all(k.is_mounted for k in keys) else []

        keys = await wait_for(pilot, rebuilt, 10, "the footer's keys built anew")
        await pilot.pause()
        assert [node for node in app.restyled if node in keys] == []
        assert [key.has_class("-compact") for key in keys] == [compact, compact, compact, True]
