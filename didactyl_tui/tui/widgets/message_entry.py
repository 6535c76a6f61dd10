"""One message in the conversation (the user's or the agent's), rendered as markdown.

A streaming reply is fed token deltas with :meth:`MessageEntry.feed` (the agent loop has already coalesced
them) and written through Textual's ``MarkdownStream``, which appends to the last block and batches its own
renders: the one throttle on this path, so a flood of deltas never queues one render per token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical

if TYPE_CHECKING:
    from textual.widgets import Markdown
    from textual.widgets.markdown import MarkdownStream


class MessageEntry(Vertical):
    """A user or assistant message."""

    def __init__(self, role: str, text: str = "", *, streaming: bool = False) -> None:
        super().__init__(classes=f"message -{role}")
        self.role = role
        self._text = text
        self._stream: MarkdownStream | None = None
        self.streaming = streaming
        self.border_title = "you" if role == "user" else "agent"

    @property
    def text(self) -> str:
        """The whole message so far (including deltas not yet painted)."""
        return self._text

    def compose(self) -> ComposeResult:
        from textual.widgets import Markdown  # markdown-it is not needed for the first (empty) frame

        yield Markdown(self._text, classes="message-body")

    @property
    def markdown(self) -> Markdown:
        from textual.widgets import Markdown

        return self.query_one(Markdown)

    async def feed(self, delta: str) -> None:
        """Add a streamed piece of the reply (MarkdownStream paints it on its next render)."""
        if not delta:
            return
        self._text += delta
        await self._write(delta)

    async def _write(self, chunk: str) -> None:
        if self._stream is None:
            markdown = self.markdown
            self._stream = type(markdown).get_stream(markdown)
        await self._stream.write(chunk)

    async def finish(self, note: str | None = None) -> None:
        """End streaming: paint what is left, then append ``note`` (e.g. "cancelled") in italics."""
        if note:
            suffix = f"\n\n*({note})*" if self._text else f"*({note})*"
            self._text += suffix
            await self._write(suffix)
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.streaming = False
        self.remove_class("-streaming")
