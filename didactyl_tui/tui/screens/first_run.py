"""First run with no model configured: one screen that says how to set one; everything else still works."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Footer, Markdown

from ...config import Config
from ...config_file import config_path
from ..actions import dialog_bindings
from .dialog import Dialog


def model_help_markdown(config_file: str) -> str:
    return f"""\
## No model configured yet

didactyl runs fine without one: memory, profile and relays all work. To chat, it needs a model: any
[litellm](https://docs.litellm.ai/docs/providers) model name.

**Right now** — *Set model now*: model, server, API key (`none` for a local server that needs no key), a
connection test, and the server's model list when it has one. Used at once, no restart; remembered in the
app's state file, and a key typed there in the API key file (0600, `[llm] api_key_file`).

**For good** — in `{config_file}`:

```toml
[llm]
model = "openai/gpt-4o-mini"  # or "ollama/llama3", ...
api_base = ""     # a self-hosted or OpenAI-compatible server
api_key_env = ""  # the variable holding the key, not the key
```

**For this shell** — `export DIDACTYL_MODEL=...` and restart. Which wins: `$DIDACTYL_MODEL`, then the model
set here, then the config file.
"""


class FirstRunScreen(Dialog[str | None]):
    """Dismissed with ``"switch_model"`` (set one now: the confirm key) or ``None`` (the close key: continue
    without)."""

    BINDINGS = dialog_bindings(close="Continue without a model", confirm="Set model now")
    AUTO_FOCUS = "#set-model"

    def __init__(self, config: Config, env: Mapping[str, str]) -> None:
        super().__init__()
        self._config_file = str(config.path or config_path(None, dict(env)))

    def compose(self) -> ComposeResult:
        with Vertical(id="first-run", classes="dialog"):
            with VerticalScroll(id="first-run-scroll", can_focus=False):  # the buttons stay in sight
                yield Markdown(model_help_markdown(self._config_file), id="first-run-help")
            with Horizontal(classes="dialog-actions"):
                yield Button("Set model now", id="set-model", variant="primary")
                yield Button("Continue without a model", id="continue")
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss("switch_model" if event.button.id == "set-model" else None)

    def action_confirm(self) -> None:
        self.dismiss("switch_model")

    def action_close(self) -> None:
        self.dismiss(None)
