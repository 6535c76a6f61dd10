"""Switch the model at runtime (the service remembers it in state.toml)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static


class ModelSwitchScreen(ModalScreen[str | None]):
    """Dismissed with the new model name, or ``None`` on cancel."""

    CSS_PATH = "dialogs.tcss"  # read when first shown, not before the first frame

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: str) -> None:
        super().__init__(classes="dialog-screen")
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="model-switch", classes="dialog"):
            yield Static("Model (a litellm name, e.g. openai/gpt-4o-mini, ollama/llama3)", classes="dialog-title")
            yield Input(self.current, placeholder="provider/model", id="model-name")
            with Horizontal(classes="dialog-actions"):
                yield Button("Use this model", id="use", variant="primary")
                yield Button("Cancel", id="cancel")

    def _choose(self) -> None:
        name = self.query_one("#model-name", Input).value.strip()
        if not name:
            self.notify("Type a model name.", title="Model", severity="warning")
            return
        self.dismiss(name)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._choose()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "use":
            self._choose()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)
