"""tui/one_layout.py: requests a layout pass raises itself are forgotten; those made before it stand; a screen
without Textual's private state gets the plain pass."""

from __future__ import annotations

from types import SimpleNamespace

from didactyl_tui.tui.one_layout import layout_once


class Widget:  # hashable, as Textual's widgets are
    def __init__(self, required: bool) -> None:
        self._layout_required = required


def test_requests_raised_by_the_pass_are_dropped_and_earlier_ones_stand() -> None:
    waiting, sized = Widget(True), Widget(False)
    screen = SimpleNamespace(_compositor=SimpleNamespace(widgets=[waiting, sized]))
    ran: list[bool] = []

    def run() -> None:
        ran.append(True)
        sized._layout_required = True  # a block the pass just sized asks again

    layout_once(screen, run)  # type: ignore[arg-type]
    assert ran == [True] and waiting._layout_required and not sized._layout_required


def test_without_textuals_private_state_the_pass_runs_as_it_is() -> None:
    ran: list[bool] = []
    layout_once(SimpleNamespace(), lambda: ran.append(True))  # type: ignore[arg-type]
    assert ran == [True]
