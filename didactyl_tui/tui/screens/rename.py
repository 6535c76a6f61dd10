"""Give a chat a title."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static


class RenameScreen(ModalScreen[str | None]):
    """Dismissed with the new title, or ``None`` on cancel."""

    CSS_PATH = "dialogs.tcss"  # read when first shown, not before the first frame

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str) -> None:
        super().__init__(classes="dialog-screen")
        self.current = title

    def compose(self) -> ComposeResult:
        with Vertical(id="rename-dialog", classes="dialog"):
            yield Static("Rename this chat", classes="dialog-title")
            yield Input(self.current, placeholder="a title", id="chat-title", max_length=200)
            with Horizontal(classes="dialog-actions"):
                yield Button("Rename", id="rename", variant="primary")
                yield Button("Cancel", id="cancel")

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

    def action_cancel(self) -> None:
        self.dismiss(None)
