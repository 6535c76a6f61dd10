"""First run with no model configured: one screen that says how to set one; everything else still works."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Footer, Markdown

from ...config import Config, config_path
from ..actions import dialog_bindings
from .dialog import Dialog


def model_help_markdown(config_file: str) -> str:
    return f"""\
## No model configured yet

didactyl runs fine without one: memory, profile and relays all work. To chat, tell it which model to use
(any [litellm](https://docs.litellm.ai/docs/providers) model name):

**For this shell** — set an environment variable and restart:

```sh
export DIDACTYL_MODEL="openai/gpt-4o-mini"    # and OPENAI_API_KEY=...
```

**For good** — in `{config_file}`:

```toml
[llm]
model = "anthropic/claude-sonnet-4-5"  # or "ollama/llama3"
api_base = ""     # a self-hosted or OpenAI-compatible server
api_key_env = ""  # the variable holding the key, not the key
```

**Right now** — press *Set model now*: model, server and key variable, a connection test, and the server's
model list when it has one (remembered in the app's state file, not in your config). Which wins:
`$DIDACTYL_MODEL`, then the model set here, then the config file.
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
