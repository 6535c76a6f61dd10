"""One message in the conversation (the user's or the agent's), rendered as markdown.

What shows the markdown, and paints a streaming reply, is the reply view's body (``tui/streaming``: the fast
path or Textual's public one); the entry owns the text, cleaned of control sequences, and its frame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content

from ...terminal_text import StreamCleaner, clean
from ..streaming import choose_path, new_body
from ..streaming.reply import ReplyHost, ReplyPath

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.rules_core import StateCore
    from textual.widget import Widget
    from textual.widgets import Markdown


class MessageEntry(Vertical, ReplyHost):
    """A user or assistant message."""

    def __init__(self, role: str, text: str = "", *, streaming: bool = False, path: ReplyPath | None = None) -> None:
        super().__init__(classes=f"message -{role}")
        self.role = role
        # The model's words (and the user's pasted text) are outside text: cleaned before they are painted.
        self._text = clean(text)
        self._cleaner = StreamCleaner()  # a streamed reply: a sequence cut between two pieces goes whole
        self.streaming = streaming
        self.finished = not streaming  # a streamed reply: True once finish() has painted all of it
        # The user's own line breaks are kept (a single newline is only a space in markdown); replies stay
        # plain markdown.
        self._body = new_body(path or choose_path(), self, streaming=streaming,
                              parser_factory=_user_parser if role == "user" else None)
        self.border_title = "you" if role == "user" else "agent"

    def mark_unanswered(self, status: str, *, in_part: bool, mark: str = "") -> None:
        """A user message whose turn failed or was cancelled (``status``): kept, marked, never sent again;
        ``in_part``: the turn had said or done something first (kept too, marked); ``mark``: said otherwise (a
        message attach could not deliver: "not delivered: …")."""
        from ...service.types import unanswered_note

        self.add_class("-failed")
        # A stored status, or the service's words: never markup.
        self.border_subtitle = Content(mark or unanswered_note(status, in_part=in_part))

    @property
    def text(self) -> str:
        """The whole message so far (including deltas not yet painted)."""
        return self._text

    @property
    def painted_text(self) -> str:
        """What is on screen (``text`` once painting caught up)."""
        return self._text[: self._body.painted]

    def compose(self) -> ComposeResult:
        yield from self._body.compose()

    @property
    def markdown(self) -> Markdown:
        """The live (last) Markdown part: the only one a streamed reply still appends to."""
        return self._body.markdown

    def finished_parts(self) -> list[Widget]:
        """The parts above the live one (a long streamed reply's finished blocks), folded or not."""
        return self._body.finished_parts()

    @property
    def part_sources(self) -> list[str]:
        """The markdown source of each part, top to bottom (one part unless a long reply streamed in)."""
        return self._body.part_sources()

    async def feed(self, delta: str) -> None:
        """Add a streamed piece of the reply; painted when the body says (returns at once: never waits for a
        paint)."""
        delta = self._cleaner.feed(delta)
        if not delta:
            return
        self._text += delta
        await self._body.feed()

    async def finish(self, note: str | None = None) -> None:
        """End streaming: paint what is left, then append ``note`` (e.g. "cancelled") in italics."""
        self._text += self._cleaner.flush()  # what was held back as a possible escape sequence
        self._text = noted(self._text, note)
        self.streaming = False
        await self._body.finish()
        self.finished = True
        self._streaming_border(False)

    def on_mount(self) -> None:
        if self.streaming:
            self._streaming_border(True)

    def _streaming_border(self, on: bool) -> None:
        """The accent border while streaming, as an inline style: toggling a class would restyle every
        markdown block below this widget (hundreds in a long reply) at the moment the last token lands."""
        if on:
            from textual.color import Color

            accent = Color.parse(self.app.get_css_variables().get("accent", "ansi_bright_blue"))
            self.styles.border = ("round", accent)
            return
        for edge in ("border_top", "border_right", "border_bottom", "border_left"):
            self.styles.clear_rule(edge)
        self.refresh(layout=True)


def noted(text: str, note: str | None) -> str:
    """A reply ended early, with why in italics after it (``note``: "cancelled", "interrupted"; None: as it is)."""
    if not note:
        return text
    return f"{text}\n\n*({note})*" if text else f"*({note})*"


def _user_parser() -> MarkdownIt:
    """Markdown where a newline is a line break (as typed), not a space."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("gfm-like")
    parser.core.ruler.push("hard_breaks", _hard_breaks)
    return parser


def _hard_breaks(state: StateCore) -> None:
    for token in state.tokens:
        for child in token.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"
