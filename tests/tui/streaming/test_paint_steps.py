"""tui/streaming: a streaming paint's steps (blocks mounted, a part handed over, the tail) cost one layout pass,
run after them; while they run an update paints only what lies outside the conversation (a key's echo).
Real widgets in a small app with the real stylesheet."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.screen import Screen
from textual.widgets import Input, Static
from tui_support import frames_showing, screen_text, wait_for

from didactyl_tui.tui.app import DidactylApp
from didactyl_tui.tui.streaming.fast import FastBody
from didactyl_tui.tui.streaming.one_layout import echo_only
from didactyl_tui.tui.streaming.reply import ReplyPath
from didactyl_tui.tui.streaming.screen_hooks import FastScreenHooks
from didactyl_tui.tui.streaming.typing_clock import note_input
from didactyl_tui.tui.widgets.conversation import Conversation

TEXT = "\n\n".join(f"Paragraph {n} " + "word " * 30 if n % 3 else f"- item {n}\n- item {n}b" for n in range(24))


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


async def test_a_paints_steps_run_no_layout_pass_and_one_follows_them(monkeypatch: Any) -> None:
    passes: list[bool] = []  # True: a full pass while a paint's steps ran
    inside: list[bool] = [False]
    original_steps, original_layout = FastBody._append_locked, ChatScreen._refresh_layout

    async def steps(self: FastBody, *args: Any) -> Any:
        inside[0] = True
        try:
            return await original_steps(self, *args)
        finally:
            inside[0] = False

    def layout(self: ChatScreen, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("scroll", False):
            passes.append(inside[0])
        return original_layout(self, *args, **kwargs)

    monkeypatch.setattr(FastBody, "_append_locked", steps)
    monkeypatch.setattr(ChatScreen, "_refresh_layout", layout)
    app = ChatApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        entry = await app.screen.conversation.start_reply()
        passes.clear()
        for n in range(0, len(TEXT), 300):
            await entry.feed(TEXT[n:n + 300])
            await pilot.pause()
        await wait_for(pilot, lambda: entry.painted_text == TEXT, 30, "every delta painted")
        assert passes and not any(passes)  # passes ran, none while a paint's steps ran
        await entry.finish()
        await pilot.pause()
        assert "".join(entry.part_sources) == TEXT and len(entry.finished_parts()) >= 1
        assert "Paragraph 23" in screen_text(app)


async def test_while_steps_run_an_echo_is_painted_and_the_pass_waits() -> None:
    app = ChatApp()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        screen = app.screen
        conversation, box = screen.conversation, screen.query_one("#box", Input)
        assert not echo_only(screen, conversation)  # no pass due: nothing held
        app.set_focus(None)
        await pilot.pause()
        frames = frames_showing(app, lambda: box.value)
        # No await from here on: Textual's own update must not run in between.
        block = Static("a streamed block")
        conversation.mount(block)
        screen._layout_required = True  # the mount's pass is due
        box.insert_text_at_cursor("x")  # and a key's echo
        screen._dirty_widgets.add(box)
        note_input()  # typed in the message box
        assert echo_only(screen, conversation)
        assert frames == ["x"] and screen._layout_required  # the echo went out; the pass still waits
        assert echo_only(screen, conversation) and frames == ["x"]  # nothing more to paint: held, no frame
        with screen.paint_steps():
            pass  # the steps end: the pass runs at the next update
        await wait_for(pilot, lambda: not screen._layout_required and block.region.height == 1, 10, "the pass")


def test_while_someone_types_paints_are_further_apart(monkeypatch: Any) -> None:
    import time
    from types import SimpleNamespace

    from didactyl_tui.tui.streaming import fast, typing_clock

    body = FastBody(SimpleNamespace(text=""), streaming=True, parser_factory=None)  # type: ignore[arg-type]
    monkeypatch.setattr(typing_clock, "_last_input", float("-inf"))
    body._frame_composed(time.thread_time())  # a cheap paint, nobody typing: the shortest gap
    assert body._next_paint_at - time.monotonic() <= fast.MIN_PAINT_GAP_S
    typing_clock.note_input()
    body._frame_composed(time.thread_time())
    assert body._next_paint_at - time.monotonic() > fast.MIN_PAINT_GAP_S
    assert body._next_paint_at - time.monotonic() <= fast.TYPING_PAINT_GAP_S


async def test_a_resize_to_the_size_laid_out_lays_nothing_out(monkeypatch: Any) -> None:
    """At start the screen gets three Resizes to one size (the app's first, its idle check, the screen's own first
    pass): only a new size is a pass of its own; a layout asked for meanwhile still runs at the next update."""
    from textual import events
    from textual.geometry import Size

    passes: list[tuple[int, int]] = []
    original_layout = ChatScreen._refresh_layout

    def layout(self: ChatScreen, *args: Any, **kwargs: Any) -> Any:
        passes.append(tuple(args[0]) if args and args[0] is not None else tuple(self.size))
        return original_layout(self, *args, **kwargs)

    monkeypatch.setattr(ChatScreen, "_refresh_layout", layout)
    app = ChatApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = app.screen
        # No await from here on: a pass of Textual's own update must not run in between.
        passes.clear()
        screen._screen_resized(Size(100, 30))  # the size it is laid out at: nothing
        assert passes == []
        screen._screen_resized(Size(90, 30))  # another size: a pass, at once
        assert passes == [(90, 30)]
        screen._screen_resized(Size(100, 30))
        block = Static("a block")
        await screen.conversation.mount(block)
        screen.post_message(events.Resize(screen.size, screen.size))
        await wait_for(pilot, lambda: block.region.height == 1, 10, "the mount's own pass")
