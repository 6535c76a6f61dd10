"""Questions before something that cannot be undone: a yes/no before publishing (a rollback) or losing work
(quitting), and save / discard / keep editing before closing an editor with unsaved text."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Button, Footer, Static

from ..actions import dialog_bindings
from .dialog import Dialog


class ConfirmScreen(Dialog[bool]):
    """Dismissed with True (confirmed: the confirm key or button) or False (the close key, or cancel)."""

    BINDINGS = dialog_bindings(close="Cancel", confirm="Confirm")
    AUTO_FOCUS = "#confirm"

    def __init__(self, question: str, *, title: str, confirm_label: str = "Yes", cancel_label: str = "Cancel",
                 focus_cancel: bool = False) -> None:
        super().__init__()
        if focus_cancel:  # Enter takes the harmless answer
            # Per dialog: Textual reads self.AUTO_FOCUS (Screen._update_auto_focus), though it types it a ClassVar.
            self.AUTO_FOCUS = "#cancel"  # type: ignore[misc]
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
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_close(self) -> None:
        self.dismiss(False)


class UnsavedChangesScreen(Dialog[str]):
    """Closing an editor with unsaved text: dismissed with "save" (the confirm key), "discard" or "keep" (the
    close key: keep editing)."""

    BINDINGS = dialog_bindings(close="Keep editing", confirm="Save")
    AUTO_FOCUS = "#keep"  # the harmless choice under Enter

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical(id="unsaved-dialog", classes="dialog") as box:
            box.border_title = "Unsaved changes"
            yield Static(Content(f"Your changes to {self.what} are not saved."), id="unsaved-question")
            with Horizontal(classes="dialog-actions"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Discard", id="discard", variant="error")
                yield Button("Keep editing", id="keep")
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id or "keep")

    def action_confirm(self) -> None:
        self.dismiss("save")

    def action_close(self) -> None:
        self.dismiss("keep")
