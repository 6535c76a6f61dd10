"""A message's Markdown whose height is measured once per width, not once per height of the message around it.

Textual measures a container whose children all have a dynamic height (``auto``, ``fr``, ``%``) by arranging
it inside its parent's height, so the arrangement it caches is keyed by that height. A streaming reply's
entry grows on every paint, so each displayed part of it (and each list and fence inside) was re-arranged and
its text re-wrapped on every frame (~45% of a frame in a 10,000-token reply, measured). A Markdown's blocks
are all ``height: auto``: their arrangement does not depend on the height around them, so the part is measured
at height 0, which its cache keeps for as long as its width and children do not change. Same heights, same
picture; only the cost differs.

A streaming reply hands its part only finished blocks (``live_tail.finished_length``). ``Markdown.append``
re-parses and re-renders the last block on every append (it may still be growing) and holds every frame while
it mounts; ``append_blocks`` parses only the new text and mounts its blocks after the others, letting a frame
(a key's echo) through meanwhile.

A part posts no table of contents: no message shows one, and the one Markdown posts on every update bubbled up to
the panes around the chat, whose message loops keep the last message they handled until the next one comes. A
rarely-messaged ancestor kept a cleared chat's last reply (~900 widgets of a 10,000-token reply) that way (#34).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from textual.await_complete import AwaitComplete
from textual.geometry import Size
from textual.message import Message
from textual.widgets import Markdown
from textual.widgets._markdown import MarkdownHeader

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from textual.widget import Widget

# A finished message up to this long has its blocks made as it is composed, so they are mounted with it: a resumed
# chat's screen of entries is one mount. Textual's Markdown makes them after its own mount (the source parsed on a
# thread, then a mount of its own): for a screen of stored messages, a thread trip and a mount per message, ~75 ms
# of CPU of the ~300 that `didactyl --continue` spent before its first frame beyond a new chat's (measured). Longer
# ones keep Textual's way: their parsing stays off the loop.
COMPOSE_PARSE_CHARS = 6_000


class MessagePart(Markdown):
    """A Markdown (the whole of a message, or one part of a long streamed reply)."""

    _blocks_source: str | None = None  # the source whose blocks compose() made (Markdown's mount then leaves them be)

    def compose(self) -> Iterator[Widget]:
        source = getattr(self, "_initial_markdown", None)  # Textual 8.2's: the text given to the constructor
        if not source or len(source) > COMPOSE_PARSE_CHARS or not hasattr(self, "_parse_markdown"):
            return  # empty (a reply to stream into), long, or a Markdown without that state: made after mount
        self._theme = self.app.theme  # as Markdown.update sets it
        tokens = parser_for(self._parser_factory).parse(source)
        self._markdown = source
        lines = source.splitlines()
        self._last_parsed_line = len(lines) - (1 if lines and lines[-1] else 0)
        self._blocks_source = source
        yield from self._parse_markdown(tokens)

    def update(self, markdown: str) -> AwaitComplete:
        composed, self._blocks_source = self._blocks_source, None
        if composed is not None and markdown is composed:
            return AwaitComplete(_nothing())  # Markdown's mount, with the blocks composed already
        return super().update(markdown)

    def post_message(self, message: Message) -> bool:
        if isinstance(message, Markdown.TableOfContentsUpdated):
            return False  # nobody reads it (above); not posting it also spares each update's trip up the tree
        return super().post_message(message)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if not width or not self._nodes:
            return 0
        if any(not child.styles.is_auto_height for child in self.displayed_children):
            return super().get_content_height(container, viewport, width)  # fr or % children: as Textual does
        return self.arrange(Size(width, 0)).total_region.height

    async def append_blocks(self, text: str) -> None:
        """Append ``text``, which is whole blocks (it ends where a block ends), after the blocks already here.

        Reads the Markdown's own state (source, parsed-line mark, block factory, as of Textual 8.2); a Markdown
        without it, or a source not ending a line, gets ``append``.
        """
        source = self.source
        parse_blocks = getattr(self, "_parse_markdown", None)
        if not text:
            return
        if parse_blocks is None or not hasattr(self, "_last_parsed_line") or (source and not source.endswith("\n")):
            await self.append(text)
            return
        parser = parser_for(self._parser_factory)
        start = len(source.splitlines())  # the line the new text starts on
        async with self.lock:  # never between an append's or an update's steps
            tokens = parser.parse(text)
            blocks = list(parse_blocks(tokens))
            for block in blocks:
                first, last = block.source_range
                block.source_range = (first + start, last + start)
            self._markdown = source + text
            for token in reversed(tokens):
                if token.map is not None and token.level == 0:
                    self._last_parsed_line = start + token.map[0]  # where a later append re-parses from
                    break
            if any(isinstance(block, MarkdownHeader) for block in blocks):
                self._table_of_contents = None
            if blocks:
                await self.mount_all(blocks)


async def _nothing() -> None:
    return None


_PARSERS: dict[Callable[[], MarkdownIt] | None, MarkdownIt] = {}


def parser_for(factory: Callable[[], MarkdownIt] | None) -> MarkdownIt:
    """One parser per factory, made once (making one costs more than parsing a short message); used on the UI
    thread only."""
    parser = _PARSERS.get(factory)
    if parser is None:
        from markdown_it import MarkdownIt

        parser = _PARSERS[factory] = MarkdownIt("gfm-like") if factory is None else factory()
    return parser
