"""The first run's question: where does the agent's key live? Shown before the service starts, only when there is no
key yet and none is named elsewhere (no ``agent.key``, no ``$DIDACTYL_NSEC``, no ``[signer] bunker`` nor
``$DIDACTYL_BUNKER``). A key made on this machine (the default, what the commands and ``serve`` do), a signer the
person has (its ``bunker://`` URI pasted), or a phone signer that scans a ``nostrconnect://`` code. The connecting and
keeping is the service's (service/signer_setup.py); these dialogs only ask and show."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Footer, Input, Label, Static

from ...actions import keys_for
from ...errors import DidactylError
from ..actions import dialog_bindings
from .dialog import Dialog

if TYPE_CHECKING:
    from types import ModuleType

    from ...service.signer_setup import PhoneInvitation, SignerKept
    from ..host import DidactylHost

LOCAL = "local"  # a key made on this machine when the service starts (what a first run did before)
Line = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class SignerSetup:
    """What the dialogs may ask of the service, and what they show before asking."""

    key_file: str
    relays: str  # offered for a phone signer
    use_bunker: Callable[[str, Line], Awaitable[SignerKept]]
    use_phone: Callable[[str, Callable[[PhoneInvitation], None], bool, Line], Awaitable[SignerKept]]


def _masked(text: str) -> bool:
    """A pasted text is shown only when it is a bunker:// URI: anything else may be a secret key."""
    text = text.strip().lower()
    return not text.startswith("bunker://") or "nsec1" in text


class KeyPlaceScreen(Dialog["SignerKept | str | None"]):
    """Dismissed with :data:`LOCAL` (the confirm key, or Enter on the default button), the signer kept, or ``None``
    (quit, nothing made: the close key asks first, and back is the answer it defaults to; while connecting the close
    key stops the connection)."""

    BINDINGS = dialog_bindings(close="Quit", confirm="Create a key here")
    AUTO_FOCUS = "#create-key"

    def __init__(self, setup: SignerSetup) -> None:
        super().__init__()
        self.setup = setup
        self.connecting = False

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="key-place", classes="dialog", can_focus=False):
            yield Static("Where does the agent's key live?", classes="dialog-title")
            yield Static("First start: the agent has no key yet. The key signs and encrypts everything the agent "
                         "keeps on Nostr (its memory, soul, tasks, messages).", markup=False)
            yield Button("Create a key on this machine", id="create-key", variant="primary")
            yield Static(Text(f"A new key in {self.setup.key_file} (0600). The default."), classes="key-place-help")
            yield Label("Or use a signer you have (nsec.app, a bunker on your server): paste its bunker:// URI")
            with Horizontal(id="bunker-row"):
                yield Input(placeholder="bunker://…", password=True, id="bunker-uri", max_length=8192)
                yield Button("Use this signer", id="use-bunker")
            yield Button("Connect a phone signer", id="phone")
            yield Static("Shows a nostrconnect:// link and its QR code for a signer app (Amber…) to scan.",
                         classes="key-place-help", markup=False)
            yield Static("", id="key-place-result")
        yield Footer()

    def show_line(self, line: str, *, failed: bool = False) -> None:
        result = self.query_one("#key-place-result", Static)
        result.set_class(failed, "-failed")
        result.update(Text(" ".join(line.split())))  # outside words: literal, one line

    @on(Input.Changed, "#bunker-uri")
    def _uri_changed(self, event: Input.Changed) -> None:
        event.input.password = _masked(event.value)

    def _use_bunker(self) -> None:
        if self.connecting:
            return
        text = self.query_one("#bunker-uri", Input).value
        if not text.strip():
            self.show_line("Paste the bunker:// URI your signer shows first.", failed=True)
            self.query_one("#bunker-uri", Input).focus()
            return
        self.connect_bunker(text)

    @work(exclusive=True, group="key-place", exit_on_error=False)
    async def connect_bunker(self, text: str) -> None:
        self._busy(True)
        self.show_line(f"Connecting to the signer… ({self._close_key()} stops)")
        try:
            kept = await self.setup.use_bunker(text, self.show_line)
        except DidactylError as exc:
            self.show_line(exc.one_line(), failed=True)  # what was pasted stays in the field
            self.query_one("#bunker-uri", Input).focus()
            return
        finally:
            self._busy(False)
        self.dismiss(kept)

    def _busy(self, busy: bool) -> None:
        self.connecting = busy
        for button in self.query(Button):
            button.disabled = busy

    def _close_key(self) -> str:
        return keys_for("close", cast("DidactylHost", self.app).config.keys)

    def _phone_closed(self, kept: SignerKept | None) -> None:
        if kept is not None:
            self.dismiss(kept)
            return
        self.show_line("No phone signer connected: choose again.")
        self.query_one("#phone", Button).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._use_bunker()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "create-key":
            self.dismiss(LOCAL)
        elif event.button.id == "use-bunker":
            self._use_bunker()
        elif event.button.id == "phone":
            self.app.push_screen(PhoneSignerScreen(self.setup), self._phone_closed)

    def action_confirm(self) -> None:
        if not self.connecting:
            self.dismiss(LOCAL)

    def action_close(self) -> None:
        if self.connecting:
            self.workers.cancel_group(self, "key-place")
            self._busy(False)
            self.show_line("Stopped: nothing was kept. Choose again.")
            return
        from .confirm import ConfirmScreen

        question = ConfirmScreen("Quit without a key for the agent? Nothing is made; didactyl asks again at its next "
                                 "start.", title="Quit?", confirm_label="Quit", cancel_label="Back to the question",
                                 focus_cancel=True)
        def answered(quit_now: bool | None) -> None:
            if quit_now:
                self.dismiss(None)

        self.app.push_screen(question, answered)


class PhoneSignerScreen(Dialog["SignerKept | None"]):
    """A ``nostrconnect://`` code for a phone signer, on the relays typed here; dismissed with the signer kept once
    it answered, or ``None`` (the close key: stop waiting)."""

    BINDINGS = dialog_bindings(close="Stop waiting", confirm="Show the code")
    AUTO_FOCUS = "#phone-relays"

    def __init__(self, setup: SignerSetup) -> None:
        super().__init__()
        self.setup = setup
        self.invitation: PhoneInvitation | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="phone-signer", classes="dialog", can_focus=False):
            yield Static("Connect a phone signer", classes="dialog-title")
            yield Label("Relays both the phone and this app reach (comma-separated):")
            with Horizontal(id="phone-relay-row"):
                yield Input(self.setup.relays, placeholder="wss://relay.example", id="phone-relays", max_length=2048)
                yield Button("Show the code", id="show-code", variant="primary")
            yield Static("", id="phone-status")
            yield Static("", id="phone-uri")
            yield Static("", id="phone-qr")
        yield Footer()

    def _status(self, line: str, *, failed: bool = False) -> None:
        status = self.query_one("#phone-status", Static)
        status.set_class(failed, "-failed")
        status.update(Text(" ".join(line.split())))

    def _start(self) -> None:
        relays = self.query_one("#phone-relays", Input).value
        if not relays.strip():
            self._status("Type a relay the phone signer can reach (wss://…).", failed=True)
            return
        self.wait_for_phone(relays)

    @work(exclusive=True, group="phone-signer", exit_on_error=False)
    async def wait_for_phone(self, relays: str) -> None:
        self._show(None)
        self.query_one("#show-code", Button).disabled = True
        self._status("Reaching the relays…")
        light = not self.app.current_theme.dark
        try:
            kept = await self.setup.use_phone(relays, self._show, light, self._status)
        except DidactylError as exc:
            self._show(None)
            self._status(exc.one_line(), failed=True)
            self.query_one("#phone-relays", Input).focus()
            return
        finally:
            for button in self.query("#show-code").results(Button):  # (none once the close key removed the screen)
                button.disabled = False
        self.dismiss(kept)

    def _show(self, invitation: PhoneInvitation | None) -> None:
        self.invitation = invitation
        self.query_one("#phone-uri", Static).update(Text(invitation.uri) if invitation else "")
        self.query_one("#phone-qr", Static).update(Text(invitation.qr, no_wrap=True) if invitation else "")
        if invitation is not None:
            self._status("Scan the code with your signer app, or paste the link into it. Waiting for it to answer.")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._start()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self._start()

    def action_confirm(self) -> None:
        self._start()

    def action_close(self) -> None:
        self.workers.cancel_group(self, "phone-signer")
        self.dismiss(None)


async def settle_key_place(app: App[Any]) -> bool:
    """On a first run (see the module doc), ask where the agent's key lives and keep the answer; else nothing. True:
    start the service; False: the person chose to quit (nothing was made)."""
    host = cast("DidactylHost", app)
    setup = await asyncio.to_thread(_signer_setup)  # crypto and relays: loaded off the UI loop
    if not await asyncio.to_thread(setup.key_choice_needed, host.config, host.data_dir, host.env):
        return True

    async def use_bunker(text: str, line: Line) -> SignerKept:
        return await setup.use_bunker(host.config, host.data_dir, host.env, text, on_auth_url=line)

    async def use_phone(relays: str, show: Callable[[PhoneInvitation], None], light: bool, line: Line) -> SignerKept:
        return await setup.use_phone_signer(host.config, host.data_dir, host.env, relays, on_invitation=show,
                                            light_background=light, on_auth_url=line)

    key_file = str(setup.key_file_path(host.data_dir))
    choice = await app.push_screen_wait(
        KeyPlaceScreen(SignerSetup(key_file, setup.invitation_relays(host.config), use_bunker, use_phone)))
    if choice is None:  # the person chose to quit (and said so twice): nothing was made
        return False
    if not isinstance(choice, str):
        app.notify(f"The agent's key is in your signer: {choice.agent_npub}; [signer] bunker is in "
                   f"{choice.config_file}", title="Remote signer")
        if choice.config_problem:
            app.notify(choice.config_problem, title="Config", severity="warning", timeout=20)
    return True


def _signer_setup() -> ModuleType:
    from ...service import signer_setup

    return signer_setup
