"""Pilot tests of the conversation's rendering: a long resumed chat (batch mount, older entries rendered when
scrolled to) and a streamed reply (painted in throttled pieces, ending exactly as the whole text renders).

The widgets run in a small app with the real stylesheet; correctness only (timings live in bench/). The streaming
tests run against both paths of the reply view (tui/streaming: ours and Textual's public MarkdownStream); what
only the fast path promises (bounded paints, parts that fold) is checked on it alone."""

from __future__ import annotations

import json
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Markdown
from tui_support import screen_text, wait_for

from didactyl_tui.tui.app import DidactylApp
from didactyl_tui.tui.streaming.fast import MAX_PAINT_CHARS, PART_BLOCKS
from didactyl_tui.tui.streaming.message_part import MessagePart
from didactyl_tui.tui.streaming.reply import ReplyPath
from didactyl_tui.tui.widgets.conversation import Conversation
from didactyl_tui.tui.widgets.history_stub import HistoryStub, specs_from_messages
from didactyl_tui.tui.widgets.message_entry import MessageEntry
from didactyl_tui.tui.widgets.tool_call_entry import ToolCallEntry

TURNS = 80


class ConversationApp(App[None]):
    CSS_PATH = DidactylApp.CSS_PATH

    def __init__(self, path: ReplyPath = ReplyPath.FAST) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        yield Conversation(id="conversation", reply_path=self.path)


BOTH_PATHS = pytest.mark.parametrize("path", [ReplyPath.FAST, ReplyPath.PUBLIC], ids=["fast", "public"])


def stored_chat(turns: int) -> list[dict[str, Any]]:
    """``turns`` question/answer pairs; every 7th answer is a tool call with its result, then the text."""
    out: list[dict[str, Any]] = []
    for n in range(turns):
        out.append({"role": "user", "content": f"question number {n} about tea"})
        if n % 7 == 3:
            call = {"id": f"call_{n}", "type": "function",
                    "function": {"name": "memory_save", "arguments": json.dumps({"content": f"fact {n}"})}}
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            out.append({"role": "tool", "tool_call_id": f"call_{n}", "content": f'{{"saved": {n}}}'})
        out.append({"role": "assistant", "content": f"Answer **{n}**:\n\n- point one of {n}\n- point two of {n}"})
    return out


async def scroll_until(pilot: Any, conversation: Conversation, step: int, done: Any) -> None:
    for _ in range(120):  # bounded: 120 steps of 60 rows is far more than the chat
        if done():
            return
        conversation.scroll_to(y=max(0, conversation.scroll_y + step), animate=False, immediate=True)
        await pilot.pause(0.03)
    raise AssertionError("scrolling never got there")


async def test_a_long_resumed_chat_shows_its_end_and_renders_older_entries_when_scrolled_to() -> None:
    messages = stored_chat(TURNS)
    app = ConversationApp()
    async with app.run_test(size=(100, 30)) as pilot:
        conversation = app.query_one(Conversation)
        await conversation.load_history(messages)
        await pilot.pause()
        # The end is on screen as full markdown; most of the chat waits in a stub.
        text = screen_text(app)
        assert f"question number {TURNS - 1} about tea" in text and f"point two of {TURNS - 1}" in text
        assert "**" not in text  # rendered, not raw markdown
        entries = list(conversation.query(MessageEntry))
        # (One stub, or two once a batch near the viewport was swapped in: when that runs depends on the load.)
        assert len(entries) < len(messages) // 3 and 1 <= len(conversation.query(HistoryStub)) <= 2
        assert conversation.last_reply() == messages[-1]["content"]

        # Scroll up as a reader would: the stub above gives way to real entries, the view stays put.
        def first_shown() -> bool:
            first = conversation.query(MessageEntry).first()
            return conversation.scroll_y <= 0 and first.text == messages[0]["content"]

        await scroll_until(pilot, conversation, -60, first_shown)
        top = screen_text(app)
        assert "question number 0 about tea" in top and "point one of 0" in top
        # And down again: whatever was skipped on the way up is rendered on the way down.
        await scroll_until(pilot, conversation, 60, lambda: not conversation.query(HistoryStub))
        # Every stored message is an entry again, in order, with tool results attached.
        texts = [e.text for e in conversation.query(MessageEntry)]
        expected = [m["content"] for m in messages if m["role"] != "tool" and m["content"]]
        assert texts == expected
        calls = list(conversation.query(ToolCallEntry))
        assert [c.result for c in calls] == [f'{{"saved": {n}}}' for n in range(TURNS) if n % 7 == 3]


async def test_a_resumed_chat_exports_and_copies_what_is_still_a_stub() -> None:
    messages = stored_chat(200)
    app = ConversationApp()
    async with app.run_test(size=(100, 30)) as pilot:
        conversation = app.query_one(Conversation)
        await conversation.load_history(messages)
        await pilot.pause()
        assert conversation.query(HistoryStub)
        exported = conversation.as_markdown()
        for n in (0, 3, 199):
            assert f"question number {n} about tea" in exported and f"Answer **{n}**" in exported
        assert exported.count("### Tool call: memory_save") == sum(1 for n in range(200) if n % 7 == 3)
        await conversation.clear()
        assert not conversation.query(HistoryStub) and conversation.last_reply() is None


def test_tool_results_attach_to_their_calls_and_orphans_are_dropped() -> None:
    specs = specs_from_messages([
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "function": {"name": "t", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "done"},
        {"role": "tool", "tool_call_id": "nobody", "content": "lost"},
        {"role": "user", "content": None},
    ])
    assert [(s.role, s.name, s.arguments, s.result) for s in specs] == [
        ("tool", "t", {"raw": "not json"}, "done"), ("user", "", None, None)]


REPLY = """Here is the plan:

1. Read the **memory** first,
2. then the relays,
3. then answer.

```python
def greet(name):
    return f"hello {name}"  # a comment with * and _
```

- one item that is long enough to wrap around the edge of the pane when the pane is narrow
- two `code` item

> quoted line

Done."""


def deltas(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


async def render_at_once(text: str, size: tuple[int, int], path: ReplyPath) -> str:
    app = ConversationApp(path)
    async with app.run_test(size=size) as pilot:
        await app.query_one(Conversation).add_reply(text)
        await pilot.pause()
        return screen_text(app)


async def render_streamed(text: str, size: tuple[int, int], piece: int,
                          path: ReplyPath) -> tuple[str, tuple[str, str, str]]:
    app = ConversationApp(path)
    async with app.run_test(size=size) as pilot:
        entry = await app.query_one(Conversation).start_reply()
        for n, delta in enumerate(deltas(text, piece)):
            await entry.feed(delta)
            if n % 5 == 0:
                await pilot.pause(0.01)  # let some paints happen mid-block (inside the fence, the list...)
        await entry.finish()
        await pilot.pause()
        return screen_text(app), (entry.text, entry.painted_text, entry.markdown.source)


@BOTH_PATHS
async def test_a_streamed_reply_ends_exactly_as_the_whole_text_renders(path: ReplyPath) -> None:
    size = (90, 40)
    expected = await render_at_once(REPLY, size, path)
    for piece in (1, 3, 17):  # deltas that cut words, fences and list items in different places
        shown, texts = await render_streamed(REPLY, size, piece, path)
        assert texts == (REPLY, REPLY, REPLY)
        assert shown == expected, f"deltas of {piece} chars render differently"


@BOTH_PATHS
async def test_a_long_streamed_reply_is_painted_in_bounded_pieces_and_complete(monkeypatch: Any,
                                                                              path: ReplyPath) -> None:
    text = "\n\n".join(
        f"Paragraph {n} " + "word " * 40 if n % 4 else f"```\ncode block {n}\n  indented {n}\n```" for n in range(60))
    assert len(text) > 3 * MAX_PAINT_CHARS
    appended: list[int] = []
    original = Markdown.append

    def spy(self: Markdown, fragment: str) -> Any:
        appended.append(len(fragment))
        return original(self, fragment)

    original_blocks = MessagePart.append_blocks

    def spy_blocks(self: MessagePart, fragment: str) -> Any:
        appended.append(len(fragment))
        return original_blocks(self, fragment)

    monkeypatch.setattr(Markdown, "append", spy)
    monkeypatch.setattr(MessagePart, "append_blocks", spy_blocks)
    app = ConversationApp(path)
    async with app.run_test(size=(100, 30)) as pilot:
        entry = await app.query_one(Conversation).start_reply()
        for n, delta in enumerate(deltas(text, 400)):
            await entry.feed(delta)
            if n % 3 == 0:
                await pilot.pause(0.05)
        await wait_for(pilot, lambda: entry.painted_text == text, 30, "the throttle to paint everything")
        await entry.finish("cancelled")
        await pilot.pause()
        full = text + "\n\n*(cancelled)*"
        assert entry.text == full and entry.painted_text == full and entry.finished
        assert "".join(entry.part_sources) == full
        assert "(cancelled)" in screen_text(app)
        assert not entry.styles.inline.has_rule("border_top")  # the streaming border is gone
        if path is ReplyPath.PUBLIC:  # one Markdown; Textual's stream decides how much goes per append
            assert entry.finished_parts() == [] and appended
            return
        # Finished blocks stayed in parts above the live one; together the parts hold the whole reply.
        parts = entry.finished_parts()
        assert len(parts) >= 2
        # A part stops growing once past PART_BLOCKS; one paint (<= MAX_PAINT_CHARS) adds at most ~10 of these blocks.
        assert all(len(part.children) <= PART_BLOCKS + 10 for part in parts)
        assert max(appended) <= MAX_PAINT_CHARS


def long_reply(blocks: int) -> str:
    """Headings, paragraphs, lists and fences: enough blocks for many parts."""
    out = []
    for n in range(blocks):
        kind = n % 5
        if kind == 0:
            out.append(f"## Part {n}")
        elif kind == 2:
            out.append("\n".join(f"- item {n}.{i} with a few words" for i in range(3)))
        elif kind == 4:
            out.append(f"```\nvalue_{n} = {n}\n```")
        else:
            out.append(f"Paragraph {n} " + "word " * 30)
    return "\n\n".join(out)


async def screens_top_and_bottom(text: str, size: tuple[int, int], piece: int | None,
                                 path: ReplyPath) -> tuple[str, list[str], Any]:
    """The screen at the end, then from the top every 20 rows, of a reply rendered at once (piece None) or
    streamed."""
    app = ConversationApp(path)
    async with app.run_test(size=size) as pilot:
        conversation = app.query_one(Conversation)
        if piece is None:
            entry = await conversation.add_reply(text)
        else:
            entry = await conversation.start_reply()
            for n, delta in enumerate(deltas(text, piece)):
                await entry.feed(delta)
                if n % 4 == 0:
                    await pilot.pause(0.02)
            await entry.finish()
        await pilot.pause(0.1)
        bottom = screen_text(app)
        folded = [p for p in entry.finished_parts() if not p.display]
        screens = []
        for y in range(0, conversation.max_scroll_y, 20):  # bounded: the reply is a few hundred rows
            conversation.scroll_to(y=y, animate=False, immediate=True)
            await pilot.pause(0.05)
            await pilot.pause(0.05)
            screens.append(screen_text(app))
        return bottom, screens, (len(entry.finished_parts()), len(folded))


@BOTH_PATHS
async def test_a_long_streamed_reply_in_parts_looks_as_the_whole_text_and_unfolds_when_scrolled_to(
        path: ReplyPath) -> None:
    text = long_reply(70)
    size = (90, 30)
    bottom, top, _ = await screens_top_and_bottom(text, size, None, path)
    s_bottom, s_top, (parts, folded) = await screens_top_and_bottom(text, size, 23, path)
    if path is ReplyPath.FAST:
        assert parts >= 5 and folded >= 2  # it streamed in parts, and those far above the end were folded
    assert s_bottom == bottom  # the joins between parts are spaced as the blocks of one Markdown
    assert len(s_top) == len(top) > 5 and "Part 0" in s_top[0]
    for n, (streamed, whole) in enumerate(zip(s_top, top, strict=True)):  # folded parts show again as they were
        assert streamed == whole, f"differs {20 * n} rows down"
