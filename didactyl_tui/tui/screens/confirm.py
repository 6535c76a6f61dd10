"""Questions before something that cannot be undone: a yes/no before publishing (a rollback) or losing work
(quitting), and save / discard / keep editing before closing an editor with unsaved text."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismissed with True (confirmed) or False (cancelled: Esc, or the cancel button)."""

    CSS_PATH = "dialogs.tcss"  # read when first shown, not before the first frame

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, *, title: str, confirm_label: str = "Yes", cancel_label: str = "Cancel") -> None:
        super().__init__(classes="dialog-screen")
        self.question = question
        self.title_text = title
        self.confirm_label = confirm_label
        self.cancel_label = cancel_label

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog", classes="dialog") as box:
            box.border_title = self.title_text
            yield Static(Content(self.question), id="confirm-question")
            with Horizontal(classes="dialog-actions"):
                yield Button(self.confirm_label, id="confirm", variant="primary")
                yield Button(self.cancel_label, id="cancel")

    def on_mount(self) -> None:
        self.query_one("#confirm", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)


class UnsavedChangesScreen(ModalScreen[str]):
    """Closing an editor with unsaved text: dismissed with "save", "discard" or "keep" (Esc: keep editing)."""

    CSS_PATH = "dialogs.tcss"

    BINDINGS = [Binding("escape", "keep", "Keep editing")]

    def __init__(self, what: str) -> None:
        super().__init__(classes="dialog-screen")
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical(id="unsaved-dialog", classes="dialog") as box:
            box.border_title = "Unsaved changes"
            yield Static(Content(f"Your changes to {self.what} are not saved."), id="unsaved-question")
            with Horizontal(classes="dialog-actions"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Discard", id="discard", variant="error")
                yield Button("Keep editing", id="keep")

    def on_mount(self) -> None:
        self.query_one("#keep", Button).focus()  # the harmless choice under Enter

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id or "keep")

    def action_keep(self) -> None:
        self.dismiss("keep")
