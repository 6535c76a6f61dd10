"""The permission gate's question (agent/tools/permission.py): a tool that acts wants to run — allow it once, always
allow this tool, or deny (the close key denies); and the tools always allowed, each revocable. Everything shown comes
from elsewhere (the model's arguments, a server's description): shown as ``Content``, never parsed as markup."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Button, Footer, Static

from ...service.types import Decision, PermissionRequest
from ...terminal_text import clean
from ..actions import dialog_bindings
from .dialog import Dialog


class PermissionScreen(Dialog[Decision]):
    """Dismissed with a :class:`Decision`: allow once (the confirm key), always, or deny (the close key)."""

    BINDINGS = dialog_bindings(close="Deny", confirm="Allow once")
    AUTO_FOCUS = "#deny"  # Enter takes the harmless answer

    def __init__(self, request: PermissionRequest) -> None:
        super().__init__()
        self.request = request

    def compose(self) -> ComposeResult:
        request = self.request
        with Vertical(id="permission-dialog", classes="dialog") as box:
            box.border_title = "Allow this tool?"
            yield Static(Content(f"The agent wants to run {clean(request.tool)} ({clean(request.origin)})."),
                         id="permission-what")
            if request.description:
                yield Static(Content(clean(request.description)), id="permission-description")
            yield Static("arguments", classes="dialog-title")
            with VerticalScroll(id="permission-arguments-box"):
                yield Static(Content(request.arguments), id="permission-arguments")
            with Horizontal(classes="dialog-actions"):
                yield Button("Allow once", id="once", variant="primary")
                yield Button("Always allow", id="always")
                yield Button("Deny", id="deny", variant="error")
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss({"once": Decision.ONCE, "always": Decision.ALWAYS}.get(event.button.id or "", Decision.DENY))

    def action_confirm(self) -> None:
        self.dismiss(Decision.ONCE)

    def action_close(self) -> None:
        self.dismiss(Decision.DENY)


class AlwaysAllowedScreen(Dialog[str | None]):
    """The tools always allowed; dismissed with the one to revoke (its button), or None (the close key)."""

    BINDINGS = dialog_bindings(close="Close")

    def __init__(self, always: list[str]) -> None:
        super().__init__()
        self.always = always

    def compose(self) -> ComposeResult:
        with Vertical(id="always-dialog", classes="dialog") as box:
            box.border_title = "Tools always allowed"
            if not self.always:
                yield Static("No tool is always allowed: each one that acts asks first.", id="always-none")
            for i, name in enumerate(self.always):
                with Horizontal(classes="always-row"):
                    yield Static(Content(clean(name)), classes="always-name")
                    yield Button("Revoke", id=f"revoke-{i}", classes="always-revoke")
            with Horizontal(classes="dialog-actions"):
                yield Button("Close", id="close")
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        button = event.button.id or ""
        self.dismiss(self.always[int(button.split("-", 1)[1])] if button.startswith("revoke-") else None)

    def action_close(self) -> None:
        self.dismiss(None)
