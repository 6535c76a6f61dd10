"""A finished message's blocks are made as its part is composed (#34: `didactyl --continue`'s first frame): they are
mounted with the part, in the mount that brings it, and look exactly as Textual's own way makes them after mount."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.widgets._markdown import MarkdownBlock
from tui_support import wait_for

from didactyl_tui.tui.streaming import message_part
from didactyl_tui.tui.streaming.message_part import MessagePart
from didactyl_tui.tui.widgets.message_entry import _user_parser

STORED = """A reply with **bold**, `code` and a [link](https://example.org).

- one item
- two items
  1. nested
  2. and more

```python
value = compute(1, 2)
```

| a | b |
|---|---|
| 1 | 2 |

> quoted

Last words.
"""


class Seen(MessagePart):
    """A part that notes how many blocks it has when its own Mount is handled."""

    blocks_at_mount = -1

    def on_mount(self) -> None:
        self.blocks_at_mount = len(self.query(MarkdownBlock))


class Column(App[None]):
    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="column")


def shape(part: MessagePart) -> list[tuple[str, tuple[int, int], int, int]]:
    """Each block as laid out: its kind, the source lines it came from, its place and its height."""
    return [(type(block).__name__, block.source_range, block.region.y - part.region.y, block.region.height)
            for block in part.query(MarkdownBlock)]


async def test_a_stored_message_has_its_blocks_when_it_is_mounted() -> None:
    app = Column()
    async with app.run_test(size=(80, 60)) as pilot:
        part = Seen(STORED)
        await app.query_one("#column").mount(part)
        assert part.blocks_at_mount > 5  # in the part's own mount, not a mount of their own after it
        await pilot.pause()
        assert part.source == STORED


async def test_a_long_message_is_parsed_after_mount_as_textual_does() -> None:
    """Parsing a long one would hold the frame: it keeps Textual's way (parsed on a thread after mount)."""
    long = STORED * (message_part.COMPOSE_PARSE_CHARS // len(STORED) + 1)
    app = Column()
    async with app.run_test(size=(80, 60)) as pilot:
        part = Seen(long)
        await app.query_one("#column").mount(part)
        assert part.blocks_at_mount == 0
        await wait_for(pilot, lambda: part.query(MarkdownBlock), 10, "the blocks, after the parse on a thread")
        assert part.source == long


@pytest.mark.parametrize("factory", [None, _user_parser], ids=["reply", "user message"])
async def test_composed_blocks_are_the_blocks_textual_makes(monkeypatch: pytest.MonkeyPatch, factory: object) -> None:
    app = Column()
    async with app.run_test(size=(80, 80)) as pilot:
        column = app.query_one("#column")
        composed = MessagePart(STORED, parser_factory=factory)  # type: ignore[arg-type]
        await column.mount(composed)
        monkeypatch.setattr(message_part, "COMPOSE_PARSE_CHARS", 0)  # the next one the way Textual makes it
        updated = MessagePart(STORED, parser_factory=factory)  # type: ignore[arg-type]
        await column.mount(updated)
        # Textual's parses on a thread, then mounts, then both are laid out
        await wait_for(pilot, lambda: len(shape(composed)) > 5 and shape(composed) == shape(updated), 10,
                       lambda: f"the same blocks: {shape(composed)} vs {shape(updated)}")
        # and goes on as a part does: Textual's append parses again from the last block it knows of (the same
        # blocks as a part made with all of the text). A new block: one growing in place keeps its old height at
        # times in Textual 8.2, composed or not (seen here), and the app hands a part only whole blocks.
        await composed.append("\nMore words.\n")
        whole = MessagePart(STORED + "\nMore words.\n", parser_factory=factory)  # type: ignore[arg-type]
        await column.mount(whole)
        await wait_for(pilot, lambda: len(shape(whole)) > 5 and shape(composed) == shape(whole), 10,
                       lambda: f"the same blocks after an append: {shape(composed)} vs {shape(whole)}")
        assert composed.source == whole.source


async def test_an_update_after_compose_replaces_the_composed_blocks() -> None:
    app = Column()
    async with app.run_test(size=(80, 60)) as pilot:
        part = MessagePart(STORED)
        await app.query_one("#column").mount(part)
        await part.update("Only this now.\n")
        await pilot.pause()
        assert [type(block).__name__ for block in part.query(MarkdownBlock)] == ["MarkdownParagraph"]
        assert part.source == "Only this now.\n"
