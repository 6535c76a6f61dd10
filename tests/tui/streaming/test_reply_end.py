"""tui/streaming: when a reply ends, what the paint throttle had not painted yet goes in one paint (the end of a
short reply reaches the screen sooner, #34), as whole blocks, and renders as the whole text does. Real widgets in a
small app with the real stylesheet."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.screen import Screen
from textual.widgets import Input
from tui_support import screen_text

from didactyl_tui.tui.app import DidactylApp
from didactyl_tui.tui.streaming import typing_clock
from didactyl_tui.tui.streaming.fast import MAX_PAINT_CHARS, FastBody
from didactyl_tui.tui.streaming.reply import ReplyPath
from didactyl_tui.tui.streaming.screen_hooks import FastScreenHooks
from didactyl_tui.tui.widgets.conversation import Conversation

TEXT = "\n\n".join(f"## Part {n}\n\nParagraph {n} " + "word " * 40 if n % 2 else f"- item {n}\n- item {n}b"
                   for n in range(40)) + "\n\n```python\nprint('the end')\n```"


class ChatScreen(FastScreenHooks, Screen[None]):
    streaming = True

    def compose(self) -> ComposeResult:
        yield Conversation(id="conversation", reply_path=ReplyPath.FAST)
        yield Input(id="box")

    @property
    def conversation(self) -> Conversation:
        return self.query_one(Conversation)


class ChatApp(App[None]):
    CSS_PATH = DidactylApp.CSS_PATH

    def on_mount(self) -> None:
        self.push_screen(ChatScreen())


async def test_what_is_left_at_the_end_goes_in_one_paint_and_reads_as_the_whole_text(monkeypatch: Any) -> None:
    assert MAX_PAINT_CHARS < len(TEXT) < 4 * MAX_PAINT_CHARS  # more than one bounded paint's worth
    paints: list[int] = []
    original = FastBody._append_locked

    async def counted(self: FastBody, *args: Any) -> bool:
        painted = await original(self, *args)
        if painted:
            paints.append(self.painted)
        return painted

    monkeypatch.setattr(FastBody, "_append_locked", counted)
    monkeypatch.setattr(typing_clock, "_last_input", float("-inf"))  # nobody typing (another test's keys, long ago)
    app = ChatApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        entry = await app.screen.conversation.start_reply()
        await entry.feed(TEXT)  # the whole reply arrives before the throttle's first paint
        await entry.finish()
        assert paints == [len(TEXT)]  # one paint, all of it
        await pilot.pause()
        assert entry.painted_text == TEXT and "".join(entry.part_sources) == TEXT
        whole = await app.screen.conversation.add_reply(TEXT)  # the same text, rendered whole
        await pilot.pause()
        blocks = [type(b).__name__ for b in entry.markdown.children]
        assert blocks == [type(b).__name__ for b in whole.markdown.children]
        assert "print('the end')" in screen_text(app)
