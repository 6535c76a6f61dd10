"""The public path's body of a message: one Textual ``Markdown``, a streaming reply written to its
``MarkdownStream`` (``Markdown.get_stream``), which batches the pieces that arrive while an append runs.

Nothing here reaches past Textual's documented API, so it works on any Textual that has ``get_stream``
(0.86 and later). It is slower on long replies than the fast path (each append re-parses the last block
and holds the frame while it mounts; every block stays laid out): bench/stream_bench.py measures both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from textual.widget import Widget
    from textual.widgets import Markdown
    from textual.widgets.markdown import MarkdownStream

    from .reply import ReplyHost


class PublicBody:
    """One Markdown widget; a streaming reply goes through its MarkdownStream."""

    def __init__(self, host: ReplyHost, *, streaming: bool, parser_factory: Callable[[], MarkdownIt] | None) -> None:
        self.host = host
        self._parser_factory = parser_factory
        self._streaming = streaming
        self._written = 0 if streaming else len(host.text)  # characters handed to the stream or the Markdown
        self._markdown: Markdown | None = None
        self._stream: MarkdownStream | None = None

    @property
    def painted(self) -> int:
        # The Markdown's source: what it has been given to render (its append renders it before returning).
        return len(self.markdown.source)

    def compose(self) -> Iterator[Widget]:
        from textual.widgets import Markdown

        self._markdown = Markdown("" if self._streaming else self.host.text, classes="message-body",
                                  parser_factory=self._parser_factory)
        yield self._markdown

    @property
    def markdown(self) -> Markdown:
        assert self._markdown is not None, "not composed yet"
        return self._markdown

    def finished_parts(self) -> list[Widget]:
        return []  # one Markdown, never split

    def part_sources(self) -> list[str]:
        return [self.markdown.source]

    async def feed(self) -> None:
        text = self.host.text
        if self._written >= len(text):
            return
        if self._stream is None:
            from textual.widgets import Markdown

            self._stream = Markdown.get_stream(self.markdown)
        piece, self._written = text[self._written:], len(text)
        await self._stream.write(piece)

    async def finish(self) -> None:
        """The reply ended: the stream hands over what it holds; whatever came after (a note) is appended."""
        self._streaming = False
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        rest = self.host.text[self._written:]
        self._written = len(self.host.text)
        if rest:
            await self.markdown.append(rest)
