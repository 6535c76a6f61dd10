"""The model dialog: model, server, key variable and key together, which source wins and why, a connection
test that also offers the server's model list. The service remembers the choice in state.toml; a key typed
here goes to the API key file (0600, ``[llm] api_key_file``) and is used at once, never shown."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Footer, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from ...service.model import NO_KEY, ModelCheck, ModelSettings, key_env_problem
from ..actions import dialog_bindings
from .dialog import Dialog

CheckModel = Callable[[ModelSettings], Awaitable[ModelCheck]]
KeyProblem = Callable[[ModelSettings], "str | None"]


def _clean(text: str) -> str:
    """Words from outside (a server's error, a model id) reach the terminal without control characters."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


@dataclass(frozen=True, slots=True)
class KeyPlace:
    """Where a typed key goes (shown in the dialog) and why one could not be used there."""

    file: str = ""
    problem: KeyProblem | None = None


class ModelSwitchScreen(Dialog[ModelSettings | None]):
    """Dismissed with the chosen :class:`ModelSettings` (with the key typed, if any), or ``None`` on cancel."""

    BINDINGS = dialog_bindings(close="Cancel", confirm="Use this model")
    AUTO_FOCUS = "#model-name"

    def __init__(self, current: ModelSettings | str, *, explanation: str = "", shadowed: str | None = None,
                 check: CheckModel | None = None, key_place: KeyPlace | None = None) -> None:
        super().__init__()
        self.current = ModelSettings(current) if isinstance(current, str) else current
        self.explanation, self.shadowed, self._check = explanation, shadowed, check
        self.key_place = key_place or KeyPlace()

    def compose(self) -> ComposeResult:
        cur = self.current
        with VerticalScroll(id="model-switch", classes="dialog", can_focus=False):
            yield Static("Model", classes="dialog-title")
            in_use = Text(f"In use: {cur.model or '(none)'}", style="bold")
            if self.explanation:
                in_use.append(f" — {self.explanation}", style="")
            yield Static(in_use, id="model-source")
            if self.shadowed:
                yield Static(Text(f"⚠ {self.shadowed}"), id="model-shadowed", classes="dialog-warning")
            yield Label("Model: provider/name, a litellm name (openai/gpt-4o-mini, anthropic/claude-sonnet-4-5, "
                        "ollama/llama3; openai/<name> for any OpenAI-compatible server)")
            yield Input(cur.model, placeholder="provider/model", id="model-name")
            yield Label("API base: an OpenAI-compatible or local server (empty: the provider's own)")
            yield Input(cur.api_base, placeholder="e.g. http://127.0.0.1:8080/v1", id="model-api-base")
            yield Label("Key variable: the NAME of the environment variable holding the key, never the key "
                        "(empty: the provider's usual one)")
            yield Input(cur.api_key_env, placeholder="e.g. OPENAI_API_KEY", id="model-key-env")
            kept = f", kept in {self.key_place.file} (0600)" if self.key_place.file else ""
            yield Label(f"API key: typed here, never shown{kept} under the key variable's name; {NO_KEY}: the "
                        "server needs no key; empty: the key variable's own")
            yield Input(NO_KEY if cur.no_key else "", placeholder=f"a key, or {NO_KEY}", password=not cur.no_key,
                        id="model-api-key")
            yield Static("", id="model-check-result")
            yield OptionList(id="model-list")
            with Horizontal(classes="dialog-actions"):
                yield Button("Test connection", id="test", disabled=self._check is None)
                yield Button("Use this model", id="use", variant="primary")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#model-list", OptionList).display = False

    def settings(self) -> ModelSettings:
        key = self.query_one("#model-api-key", Input).value.strip()
        no_key = key.lower() == NO_KEY
        return ModelSettings(self.query_one("#model-name", Input).value.strip(),
                             self.query_one("#model-api-base", Input).value.strip(),
                             self.query_one("#model-key-env", Input).value.strip(),
                             no_key=no_key, api_key="" if no_key else key)

    @on(Input.Changed, "#model-api-key")
    def _key_changed(self, event: Input.Changed) -> None:
        # "none" is no secret: shown as typed; anything else stays masked.
        event.input.password = event.value.strip().lower() != NO_KEY

    def _problem(self, settings: ModelSettings, *, need_model: bool = True) -> str | None:
        if need_model and not settings.model:
            return "Type a model name (or test the connection to list the server's models)."
        if settings.api_base and not settings.api_base.startswith(("http://", "https://")):
            return "The API base must start with http:// or https://."
        problem = key_env_problem(settings.api_key_env)
        if problem is None and self.key_place.problem is not None:
            problem = self.key_place.problem(settings)
        return problem

    def _show_result(self, line: str, *, ok: bool | None = None) -> None:
        result = self.query_one("#model-check-result", Static)
        result.set_class(ok is True, "-ok")
        result.set_class(ok is False, "-failed")
        result.update(Text(_clean(line)))
        result.call_after_refresh(result.scroll_visible, animate=False)  # a dialog taller than the terminal: seen

    def _choose(self) -> None:
        settings = self.settings()
        problem = self._problem(settings)
        if problem:
            self._show_result(problem, ok=False)
            return
        self.dismiss(settings)

    # --- the connection test (a worker: the service bounds it in time) ----------------------------

    @work(exclusive=True, group="model-check", exit_on_error=False)
    async def run_check(self) -> None:
        settings = self.settings()
        problem = self._problem(settings, need_model=not settings.api_base)
        if problem or self._check is None:
            self._show_result(problem or "The service is still starting.", ok=False)
            return
        self._show_result("Testing the connection…")
        self.query_one("#test", Button).disabled = True
        try:
            check = await self._check(settings)
        finally:
            self.query_one("#test", Button).disabled = False
        line = check.line
        if check.needs_key:  # the one fix is here, in this dialog
            line = f"No key was given and the server wants one: type it under API key ({NO_KEY}: it needs none)."
        self._show_result(("✓ " if check.ok else "✗ ") + line, ok=check.ok)
        self._offer(check.models)

    def _offer(self, models: tuple[str, ...]) -> None:
        listing = self.query_one("#model-list", OptionList)
        listing.clear_options()
        listing.add_options([Option(Text(_clean(name)), id=name) for name in models])
        listing.display = bool(models)
        if models:
            listing.border_title = f"{len(models)} models on the server: Enter picks one"
            listing.highlighted = 0
            if not self.query_one("#model-name", Input).value.strip():
                listing.focus()  # no model typed yet: ready to pick one with the arrows and Enter

    @on(OptionList.OptionSelected, "#model-list")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        name = event.option.id or ""
        typed = self.query_one("#model-name", Input).value.strip()
        # litellm needs a provider prefix; an OpenAI-compatible server is "openai/" unless another was typed.
        prefix = typed.split("/", 1)[0] if "/" in typed else "openai"
        self.query_one("#model-name", Input).value = f"{prefix}/{name}"
        self.query_one("#model-name", Input).focus()

    # --- buttons and keys -----------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._choose()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "use":
            self._choose()
        elif event.button.id == "test":
            self.run_check()
        else:
            self.dismiss(None)

    def action_confirm(self) -> None:
        self._choose()

    def action_close(self) -> None:
        self.dismiss(None)
