"""Give a chat a title."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Footer, Input, Static

from ..actions import dialog_bindings
from .dialog import Dialog


class RenameScreen(Dialog[str | None]):
    """Dismissed with the new title (Enter in the field, or the confirm key), or ``None`` (the close key)."""

    BINDINGS = dialog_bindings(close="Cancel", confirm="Rename")
    AUTO_FOCUS = "#chat-title"

    def __init__(self, title: str) -> None:
        super().__init__()
        self.current = title

    def compose(self) -> ComposeResult:
        with Vertical(id="rename-dialog", classes="dialog"):
            yield Static("Rename this chat", classes="dialog-title")
            yield Input(self.current, placeholder="a title", id="chat-title", max_length=200)
            with Horizontal(classes="dialog-actions"):
                yield Button("Rename", id="rename", variant="primary")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def _choose(self) -> None:
        title = " ".join(self.query_one("#chat-title", Input).value.split())
        if not title:
            self.notify("Type a title.", title="Rename", severity="warning")
            return
        self.dismiss(title)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._choose()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "rename":
            self._choose()
        else:
            self.dismiss(None)

    def action_confirm(self) -> None:
        self._choose()

    def action_close(self) -> None:
        self.dismiss(None)
