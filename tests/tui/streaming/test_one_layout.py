"""tui/streaming/one_layout.py: requests a layout pass raises itself are forgotten; those made before it stand; a screen
without Textual's private state gets the plain pass; a key's echo is painted before a due pass, a widget the pass
will resize is not."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from textual.widgets import Static
from tui_support import frames_showing

from didactyl_tui.tui.streaming.one_layout import layout_once


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


# --- a key's echo before the streaming layout pass (real Textual objects) -----------------------------------


def _app() -> Any:
    from textual.app import App, ComposeResult
    from textual.containers import VerticalScroll
    from textual.widgets import Input

    class Chat(App[None]):
        def compose(self) -> ComposeResult:
            with VerticalScroll(id="conversation"):
                for n in range(40):
                    yield Static(f"block {n}")
            yield Static("one line", id="pane")  # outside the conversation, sized by its text: a sidebar pane
            yield Input(id="box")

    return Chat()


async def test_an_echo_is_painted_first_and_the_layout_pass_waits_for_the_next_update() -> None:
    from didactyl_tui.tui.streaming.one_layout import echo_pending, keys_before_layout
    from didactyl_tui.tui.streaming.typing_clock import note_input

    app = _app()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        screen, conversation, box = app.screen, app.query_one("#conversation"), app.query_one("#box")
        assert not keys_before_layout(screen, conversation)  # nothing due: Textual's own update
        assert not echo_pending(screen, conversation)
        app.set_focus(None)  # the input's own messages (Changed) would count as a key still on its way
        await pilot.pause()
        frames = frames_showing(app, lambda: box.value)
        # No await from here on: Textual's own update (60 times a second) must not run in between.
        block = Static("a streamed block")
        conversation.mount(block)
        screen._layout_required = True  # a layout pass is due (as the mount's Layout message will say)
        box.insert_text_at_cursor("x")  # and a key's echo (as its Update message will say)
        screen._dirty_widgets.add(box)
        note_input()  # typed in the message box
        assert echo_pending(screen, conversation)
        assert keys_before_layout(screen, conversation)
        assert frames == ["x"]  # the echo went out in a frame of its own
        assert screen._layout_required  # the pass is still due: the next update runs it
        assert not echo_pending(screen, conversation)
        assert not keys_before_layout(screen, conversation)  # no echo waiting: the update is Textual's
        await pilot.pause()
        assert not screen._layout_required and block.region.height == 1


async def test_a_pane_the_pass_will_resize_is_not_painted_before_it() -> None:
    """A sidebar pane given more lines while a pass is due waits for the pass: painted first in its old region
    it would show its new text cut to one line for a frame."""
    import asyncio

    from didactyl_tui.tui.streaming.one_layout import _resizing, keys_before_layout
    from didactyl_tui.tui.streaming.typing_clock import note_input

    app = _app()
    async with app.run_test(size=(60, 20)) as pilot:
        screen, conversation, pane = await _laid_out_unfocused(pilot)
        assert pane.region.height == 1
        frames = frames_showing(app, lambda: pane.region.height)
        app._batch_count += 1  # Textual's own update waits (as behind a long paint) while the pane is refreshed
        await conversation.mount(Static("a streamed block"))  # a layout pass is due
        pane.update("first line\nsecond line")  # as a relay poll refreshes a pane
        for _ in range(1000):  # bounded: the widgets' messages settle in a few loop turns
            if pane in screen._dirty_widgets and pane in _resizing(screen) and app._message_queue.empty():
                break
            await asyncio.sleep(0)
        app._batch_count -= 1
        note_input()  # someone types meanwhile
        # No await from here on: Textual's own update (60 times a second) must not run in between.
        assert keys_before_layout(screen, conversation)  # outside the conversation and dirty: the pass waits
        assert frames == []  # ... but the pane was not painted in its old region
        await pilot.pause()
        assert frames and frames[0] == 2  # its first frame shows both lines


async def test_with_nobody_typing_what_changed_outside_goes_out_with_the_pass(monkeypatch: Any) -> None:
    """A pane refreshed while a pass is due, nobody typing and the pane not focused: no frame of its own first (the
    footer's keys as a turn starts, the status bar), the pass paints it with the rest in one frame."""
    from didactyl_tui.tui.streaming import typing_clock
    from didactyl_tui.tui.streaming.one_layout import keys_before_layout

    monkeypatch.setattr(typing_clock, "_last_input", float("-inf"))  # no key typed lately
    app = _app()
    async with app.run_test(size=(60, 20)) as pilot:
        screen, conversation, pane = await _laid_out_unfocused(pilot)
        frames = frames_showing(app, lambda: str(pane.render()))
        # No await from here on: Textual's own update (60 times a second) must not run in between.
        conversation.mount(Static("a streamed block"))
        screen._layout_required = True
        pane.update("new words")
        screen._dirty_widgets.add(pane)
        assert not keys_before_layout(screen, conversation)  # Textual's own update: the pass, and the pane
        assert frames == []
        await pilot.pause()
        assert frames[:1] == ["new words"]


async def _laid_out_unfocused(pilot: Any) -> tuple[Any, Any, Static]:
    """The app laid out, nothing focused (an input's own messages would count as a key on its way): its screen, the
    conversation and the pane."""
    app = pilot.app
    await pilot.pause()
    app.set_focus(None)
    await pilot.pause()
    return app.screen, app.query_one("#conversation"), app.query_one("#pane", Static)


def test_without_textuals_private_state_the_update_is_textuals() -> None:
    from didactyl_tui.tui.streaming.one_layout import echo_pending, keys_before_layout

    assert not keys_before_layout(SimpleNamespace(), SimpleNamespace())  # type: ignore[arg-type]
    assert not echo_pending(SimpleNamespace(), None)  # type: ignore[arg-type]

