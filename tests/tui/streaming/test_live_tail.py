"""tui/streaming/live_tail.py: the tail of a streaming reply asks for a layout pass only when its height changes;
growing within its last line it is only repainted, and what it shows is always the text given (as data)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from tui_support import screen_text

from didactyl_tui.tui.streaming.live_tail import LiveTail


class TailApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LiveTail()


async def test_the_tail_asks_for_layout_only_when_its_height_changes() -> None:
    app = TailApp()
    async with app.run_test(size=(40, 10)) as pilot:
        tail = app.query_one(LiveTail)
        tail.show("The first words")
        await pilot.pause()
        assert tail.size.height == 1

        tail.show("The first words and [b]more[/b]")  # still one line at 40 columns
        assert not tail._layout_required  # a repaint only
        await pilot.pause()
        assert "The first words and [b]more[/b]" in screen_text(app)  # data, not markup

        tail.show("The first words and [b]more[/b] and then enough words to wrap")  # two lines now
        assert tail._layout_required
        await pilot.pause()
        assert tail.size.height == 2 and "enough words to wrap" in screen_text(app)

        tail.show("")  # the block was handed over: nothing to show
        await pilot.pause()
        assert not tail.display
