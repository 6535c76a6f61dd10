"""A main-screen part's workers run on the screen (tui/screens/part_work.py): one exclusive group per screen,
whichever part starts the worker, as with ``@work`` on the screen's own methods (``resume`` and a turn share
``turn``: opening a chat cancels the turn being written)."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.app import App
from textual.screen import Screen
from textual.worker import WorkerState
from tui_support import wait_for

from didactyl_tui.tui.screens.main import MainScreen
from didactyl_tui.tui.screens.part_work import work_on_screen


class Part:
    def __init__(self, screen: Screen[Any]) -> None:
        self.screen = screen
        self.started: list[str] = []

    @work_on_screen(exclusive=True, group="turn")
    async def wait(self, what: str, *, forever: bool = True) -> None:
        self.started.append(what)
        if forever:
            await asyncio.Event().wait()

    @work_on_screen(group="export")
    async def side(self) -> None:
        await asyncio.Event().wait()


async def test_a_group_is_exclusive_per_screen_across_parts() -> None:
    app: App[None] = App()
    async with app.run_test() as pilot:
        screen = app.screen
        one, other = Part(screen), Part(screen)
        first = one.wait("first")
        side = one.side()  # another group: left running
        await pilot.pause()
        assert first.node is screen and first.group == "turn" and first.name == "wait"
        assert first.description == "wait('first')"
        second = other.wait("second", forever=False)  # another part, the same group: the first is cancelled
        await second.wait()
        await wait_for(pilot, lambda: first.state is WorkerState.CANCELLED, 10, "the first worker cancelled")
        assert second.state is WorkerState.SUCCESS
        assert side.state is WorkerState.RUNNING and side.group == "export"
        assert one.started == ["first"] and other.started == ["second"]
        side.cancel()


def test_the_main_screen_inherits_none_of_its_parts() -> None:
    """The parts are objects the screen owns, not classes it derives from (no state shared through ``self``)."""
    parts = {"main_chat", "main_model", "main_sidebar", "main_documents", "chat_actions"}
    assert not [c for c in MainScreen.__mro__ if c.__module__.rpartition(".")[2] in parts]
