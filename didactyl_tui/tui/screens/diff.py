"""A unified diff between two texts (memory versions, or two prompt assemblies)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Static

from ...terminal_text import clean
from ..actions import dialog_bindings
from ..widgets.diff_lines import diff_lines_content
from .dialog import Dialog


def diff_content(old: str, new: str, old_label: str, new_label: str) -> Content:
    """Coloured unified diff (theme variables only); says so when nothing differs."""
    from ...service.types import diff_lines  # the CLI's diff too

    old, new = clean(old), clean(new)  # memory versions come from relays
    lines = diff_lines(old, new, old_label=old_label, new_label=new_label)
    if not lines:
        return Content("No difference.")
    return diff_lines_content(lines)


class DiffScreen(Dialog[None]):
    BINDINGS = dialog_bindings(close="Close")
    AUTO_FOCUS = "#diff-scroll"  # the arrows and page keys scroll the diff

    def __init__(self, old: str, new: str, *, title: str, old_label: str = "old", new_label: str = "new") -> None:
        super().__init__()
        self.old, self.new = old, new
        self.title_text = title
        self.old_label, self.new_label = old_label, new_label

    def compose(self) -> ComposeResult:
        with Vertical(id="diff-dialog", classes="dialog") as box:
            box.border_title = self.title_text
            with VerticalScroll(id="diff-scroll"):
                yield Static(diff_content(self.old, self.new, self.old_label, self.new_label), id="diff-text")
        yield Footer()

    def action_close(self) -> None:
        self.dismiss(None)
