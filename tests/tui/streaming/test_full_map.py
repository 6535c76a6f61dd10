"""tui/streaming/full_map.py: while a reply streams, the full map a layout pass arranges is kept, and repainting a
widget already in it does not send the next region asked for to arrange the whole screen again; a new widget
still does. And a pane outside the conversation that is not on screen is no echo to paint before a layout pass.
Real Textual objects."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Input, Static

from didactyl_tui.tui.streaming.full_map import kept
from didactyl_tui.tui.streaming.one_layout import echo_pending, layout_once


class Chat(App[None]):
    def compose(self) -> ComposeResult:
        with VerticalScroll(id="conversation"):
            for n in range(40):
                yield Static(f"block {n}", id=f"b{n}")
        yield Input(id="box")


def full_arrangements(screen: Any) -> list[bool]:
    """Count the compositor's arrangements of the whole screen (``visible_only=False``) from now on."""
    compositor = screen._compositor
    arrange_root = compositor._arrange_root
    calls: list[bool] = []

    def counted(root: Any, size: Any, visible_only: bool = True) -> Any:
        if not visible_only:
            calls.append(True)
        return arrange_root(root, size, visible_only=visible_only)

    compositor._arrange_root = counted
    return calls


async def pass_after_a_scroll_and_a_mount(pilot: Any, run: Any) -> list[bool]:
    app = pilot.app
    screen, conversation = app.screen, app.query_one("#conversation")
    conversation.scroll_end(animate=False, immediate=True)  # a scroll marks the full map stale
    await pilot.pause()
    block = Static("a streamed block")
    await conversation.mount(block)
    calls = full_arrangements(screen)
    run(screen, lambda: screen._refresh_layout(screen.size))
    assert block.region.height == 1 and conversation.region.height > 0  # regions asked for after the pass
    return calls


async def test_the_full_map_a_pass_arranges_is_not_arranged_again_for_the_next_region() -> None:
    async with Chat().run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        assert len(await pass_after_a_scroll_and_a_mount(pilot, layout_once)) == 1


async def test_textuals_own_pass_arranges_the_screen_twice_which_is_why_the_map_is_kept() -> None:
    """Textual 8.2 as it is (the reason for ``kept``): if this fails, Textual keeps the map itself."""
    async with Chat().run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        assert len(await pass_after_a_scroll_and_a_mount(pilot, lambda _screen, run: run())) == 2


async def test_repainting_a_widget_off_screen_keeps_the_map_and_a_new_one_does_not() -> None:
    app = Chat()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        screen = app.screen
        compositor = screen._compositor
        app.query_one("#b5").region  # noqa: B018 (a full map, fresh)
        far = app.query_one("#b39")  # below the viewport: in the full map, not on screen
        assert far in compositor._full_map and far not in compositor.visible_widgets
        calls = full_arrangements(screen)

        compositor.update_widgets({far})
        assert compositor._full_map_invalidated  # Textual's own: any widget off screen counts as new
        assert far.region.height == 1 and len(calls) == 1  # and the next region arranged the screen again

        with kept(compositor):
            compositor.update_widgets({far})
            assert not compositor._full_map_invalidated
            assert far.region.height == 1 and len(calls) == 1  # kept: not arranged again

            new = Static("new")
            await app.query_one("#conversation").mount(new)
            compositor.update_widgets({new})
            assert compositor._full_map_invalidated  # a new widget is not in the map: stale, as Textual says
        assert "update_widgets" not in vars(compositor) and "reflow" not in vars(compositor)  # the class's again


async def test_a_dirty_widget_off_screen_outside_the_conversation_is_no_echo() -> None:
    class WithHiddenPane(Chat):
        def compose(self) -> ComposeResult:
            yield from super().compose()
            yield Static("relays", id="hidden-pane")

        def on_mount(self) -> None:
            self.query_one("#hidden-pane").display = False

    app = WithHiddenPane()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        screen, conversation = app.screen, app.query_one("#conversation")
        app.set_focus(None)
        await pilot.pause()
        screen._dirty_widgets.add(app.query_one("#hidden-pane"))
        assert not echo_pending(screen, conversation)  # nothing on screen to paint first
        screen._dirty_widgets.add(app.query_one("#box"))
        assert echo_pending(screen, conversation)
