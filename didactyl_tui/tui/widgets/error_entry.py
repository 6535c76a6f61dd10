"""An error shown inline in the conversation, with a retry action."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import Button, Static

from ...terminal_text import clean


class ErrorEntry(Vertical):
    """``title: message`` and a Retry button that re-sends ``retry_text``."""

    @dataclass
    class RetryRequested(Message):
        """The user asked to send the failed message again."""

        entry: ErrorEntry
        text: str

    def __init__(self, title: str, message: str, retry_text: str | None) -> None:
        super().__init__(classes="error-entry")
        self.title = title
        self.message = message
        self.retry_text = retry_text
        self.border_title = title

    def compose(self) -> ComposeResult:
        yield Static(Content(clean(self.message)), classes="error-message")
        if self.retry_text is not None:
            with Horizontal(classes="error-actions"):
                yield Button("Retry", id="retry", variant="warning", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "retry" and self.retry_text is not None:
            event.stop()
            self.post_message(self.RetryRequested(self, self.retry_text))
