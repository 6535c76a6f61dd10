"""One message in the conversation (the user's or the agent's), rendered as markdown.

A streaming reply is fed token deltas with :meth:`MessageEntry.feed`; they are buffered and written to the
Markdown widget at most every ``FLUSH_S`` seconds through Textual's ``MarkdownStream`` (which appends to the
last block instead of re-rendering the document), so a flood of deltas never queues one render per token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.timer import Timer

if TYPE_CHECKING:
    from textual.widgets import Markdown
    from textual.widgets.markdown import MarkdownStream

FLUSH_S = 0.04


class MessageEntry(Vertical):
    """A user or assistant message."""

    def __init__(self, role: str, text: str = "", *, streaming: bool = False) -> None:
        super().__init__(classes=f"message -{role}")
        self.role = role
        self._text = text
        self._pending: list[str] = []
        self._stream: MarkdownStream | None = None
        self._timer: Timer | None = None
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

    def feed(self, delta: str) -> None:
        """Add a streamed piece of the reply; painted on the next flush tick."""
        if not delta:
            return
        self._text += delta
        self._pending.append(delta)
        if self._timer is None:
            self._timer = self.set_timer(FLUSH_S, self._flush)

    async def _flush(self) -> None:
        self._timer = None
        if not self._pending:
            return
        chunk = "".join(self._pending)
        self._pending.clear()
        if self._stream is None:
            markdown = self.markdown
            self._stream = type(markdown).get_stream(markdown)
        await self._stream.write(chunk)

    async def finish(self, note: str | None = None) -> None:
        """End streaming: paint what is left, then append ``note`` (e.g. "cancelled") in italics."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if note:
            suffix = f"\n\n*({note})*" if self._text else f"*({note})*"
            self._text += suffix
            self._pending.append(suffix)
        await self._flush()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.streaming = False
        self.remove_class("-streaming")
