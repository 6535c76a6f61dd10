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

from textual.geometry import Size
from textual.message import Message
from textual.widgets import Markdown
from textual.widgets._markdown import MarkdownHeader


class MessagePart(Markdown):
    """A Markdown (the whole of a message, or one part of a long streamed reply)."""

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
        from markdown_it import MarkdownIt

        parser = MarkdownIt("gfm-like") if self._parser_factory is None else self._parser_factory()
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
