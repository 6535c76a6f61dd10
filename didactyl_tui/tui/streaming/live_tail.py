"""The unfinished last block of a streaming reply, shown as plain text until the block is finished.

Re-parsing the growing block as markdown on every paint re-mounts its widgets (a list's items, a fence's code)
inside a held frame, and the cost grows with the block. The tail is one widget whose text is replaced: the
cost of a paint no longer depends on what the block is. Once a later block starts (or the reply ends), the
finished block goes to the Markdown and renders as markdown. The text is the model's: shown as data, never as
markup.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from rich.text import Text
from textual.visual import visualize
from textual.widgets import Static

if TYPE_CHECKING:
    from markdown_it import MarkdownIt


class LiveTail(Static):
    """Plain text standing for the block still being streamed."""

    DEFAULT_CSS = "LiveTail { height: auto; }"

    def __init__(self) -> None:
        super().__init__("", markup=False, classes="live-tail")
        self._shown = ""

    def show(self, text: str) -> None:
        text = text.rstrip()  # the blank lines ending a block are the Markdown's spacing, not the tail's
        if text == self._shown:
            return
        was, self._shown = self._shown, text
        content = Text(text)
        # A layout pass costs as much as the screen is large; a tail that grows within its last line needs
        # only a repaint (Static.update's own ``layout=False``, for a size known not to change).
        width = self.content_size.width
        same_height = bool(was and text and self.display and width) and (
            # Textual passes a widget's styles as the RulesMap too (Widget.get_content_height); its types disagree.
            visualize(self, content, markup=False).get_height(self.styles, width)  # type: ignore[arg-type]
            == self.content_size.height)
        self.update(content, layout=not same_height)
        self.display = bool(text)


@lru_cache(maxsize=1)
def _block_parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    parser = MarkdownIt("gfm-like")
    parser.core.ruler.disable(["inline"], ignoreInvalid=True)  # only where blocks start matters here
    return parser


def finished_length(pending: str) -> int:
    """How many leading characters of ``pending`` (markdown starting at a block) are finished blocks: all
    lines before the line where its last top-level block starts."""
    start = 0
    for token in reversed(_block_parser().parse(pending)):
        if token.map is not None and token.level == 0:
            start = token.map[0]
            break
    if start <= 0:
        return 0
    return sum(len(line) for line in pending.splitlines(keepends=True)[:start])
