"""What a cleared chat leaves behind is let go (#34, found with bench/growth_bench.py): a removed reply's widgets
are not kept by the panes around them, and their rendered lines not by Textual's styles cache."""

from __future__ import annotations

import asyncio
import weakref

from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static

from didactyl_tui.tui.streaming import gc_pause
from didactyl_tui.tui.streaming.message_part import MessagePart

REPLY = "# A reply\n\nSome words.\n\n## With a second heading\n\n- and a list\n"


class Around(Vertical):
    """A pane around the chat: what reaches it stays in its message loop until its next message."""

    def __init__(self, part: MessagePart) -> None:
        super().__init__()
        self.part = part
        self.seen: list[Markdown.TableOfContentsUpdated] = []

    def compose(self) -> ComposeResult:
        yield self.part

    def on_markdown_table_of_contents_updated(self, message: Markdown.TableOfContentsUpdated) -> None:
        self.seen.append(message)


class Column(App[None]):
    def __init__(self, part: MessagePart) -> None:
        super().__init__()
        self.around = Around(part)

    def compose(self) -> ComposeResult:
        yield self.around


async def test_a_message_part_sends_nothing_up_that_would_keep_it_after_it_is_removed() -> None:
    """A Markdown posts its table of contents on every update, and the message bubbled up to the panes around it.
    Their message loops hold the last message handled until the next one comes: in the app, a rarely-messaged pane
    kept a cleared chat's last reply (~900 widgets) through it (growth_bench, gc referrers)."""
    part = MessagePart()
    app = Column(part)
    async with app.run_test() as pilot:
        await part.update(REPLY)
        await part.append("\n## One more heading\n\nand words\n")
        await part.append_blocks("## And another\n\nwords\n")
        await pilot.pause()
        assert "One more heading" in part.source and "And another" in part.source
        assert app.around.seen == []


class Painted(App[None]):
    CSS = "Static { background: $primary 30%; }"  # a background: its lines go through get_inner_outer

    def __init__(self) -> None:
        super().__init__()
        self.widget: Static | None = Static("a line with a background")

    def compose(self) -> ComposeResult:
        assert self.widget is not None
        yield self.widget


async def test_a_removed_widgets_rendered_lines_are_let_go_when_the_cleared_chat_is_collected() -> None:
    app = Painted()
    async with app.run_test() as pilot:
        widget, app.widget = app.widget, None
        assert widget is not None
        await pilot.pause()
        lines = weakref.ref(widget._styles_cache)
        await widget.remove()
        del widget
        app.screen.displayed_children  # noqa: B018  (its cached list lets go at once, as the Conversation's does)
        await app.screen.mount(Static("A new chat."))  # and something else is shown (the layout is done again)
        await pilot.pause()
        gc_pause.collect_when_quiet()  # as a new chat does after clearing the last one
        deadline = asyncio.get_running_loop().time() + 30
        while lines() is not None and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(gc_pause.CHECK_S)
        assert lines() is None
