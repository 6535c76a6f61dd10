"""The Textual app: a thin shell. Screens hold the logic; the AppService does all the work.

The first frame paints before the service (and so the network, the key file and litellm) is touched: the
service is imported, built and started in a worker after the first refresh. Its events reach the screens on
one typed signal, :attr:`DidactylApp.service_events`.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import App, SystemCommand
from textual.dom import DOMNode
from textual.screen import Screen
from textual.signal import Signal
from textual.theme import Theme
from textual.worker import Worker, WorkerState

from ..actions import check_keymap
from ..config import Config
from ..errors import DidactylError
from ..service.events import ServiceEvent
from ..service.state import read_state, remember
from ..terminal_text import clean, one_line
from .actions import bindings
from .screens.main import MainScreen
from .theme_files import load_themes, shipped_themes_dir
from .widgets.chat_input import ChatInput

if TYPE_CHECKING:  # the service loads after the first frame (_service_class)
    from ..service.app import AppService
    from ..service.sessions import StoredTail
    from ..service.types import Decision, PermissionRequest

FIRST_PAINT_ENV = "DIDACTYL_FIRST_PAINT_FILE"
"""Benchmark hook: when set, the app writes the wall-clock time of its first painted frame there and exits."""

STOP_TIMEOUT_S = 5.0
# Printed when the person quits at the first run's key question (the app made nothing).
NO_KEY_MADE = "didactyl: no key was made for the agent; it asks where the key lives at the next start."


class DidactylApp(App[None]):
    CSS_PATH = Path(__file__).parent / "app.tcss"
    TITLE = "didactyl"
    COMMANDS = App.COMMANDS | {lambda: _didactyl_commands()}
    BINDINGS = bindings("app")

    def __init__(
        self,
        config: Config,
        *,
        data_dir: Path,
        env: Mapping[str, str] | None = None,
        service: AppService | None = None,
        relay_labels: Mapping[str, str] | None = None,
        session_id: str | None = None,
        opened: StoredTail | None = None,
    ) -> None:
        super().__init__()
        # `didactyl --continue` / `--session ID`: the chat's last messages (read by the command) are in the first
        # frame, the rest is read after it; a chat named by its ID alone is read once the screen is up.
        self.opened = opened
        self.open_session_id = opened.session_id if opened is not None else session_id
        self.config = config
        self.data_dir = Path(data_dir)
        self.env = dict(os.environ) if env is None else dict(env)
        self.service: AppService | None = service
        self.service_ready = False
        self.relay_labels = dict(relay_labels or {})
        self._withdraw: list[Callable[[], None]] = []  # the service's listener and note asker, until unmount
        self._views_warming = False
        self.service_events: Signal[ServiceEvent] = Signal(self, "service-events")
        self._ui_thread = threading.get_ident()
        self._first_paint_file = self.env.get(FIRST_PAINT_ENV)
        self._startup_warnings: list[tuple[str, str]] = []
        # Themes before the first frame: switching theme after mount would style every widget twice.
        self._install_themes()

    # --- notifications: outside text shown as it is -------------------------------------------------

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = False) -> None:
        """Every toast of the app (a screen's or widget's ``notify`` lands here, always passing ``markup=True``,
        Textual's default, so it is ignored). Its text is data, often from outside (relay reasons, config values,
        the model): shown literally, never parsed as markup (a ``[/]`` would crash the app, a ``[ui]`` would
        vanish), and stripped of control characters and escape sequences."""
        del markup
        super().notify(clean(message), title=one_line(title), severity=severity, timeout=timeout, markup=False)

    # --- the palette: our commands ------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's own palette entries, only those we have no command for: the keys and help panel, and
        maximizing a pane (its Theme and Quit are ours, in the table; its Screenshot writes a file other users
        could read)."""
        wanted = {"Keys", "Maximize", "Minimize"}
        yield from (command for command in super().get_system_commands(screen) if command.title in wanted)

    # --- quitting: never loses work without asking ---------------------------------------------------

    def unsaved_work(self) -> list[str]:
        """What quitting now would lose, one line each: editor text not saved, memory versions on no relay
        that could not be written on this device (a full disk). Empty: quitting loses nothing."""
        from .screens.memory_editor import MemoryEditorScreen

        lines = [s.unsaved_change for s in self.screen_stack
                 if isinstance(s, MemoryEditorScreen) and s.is_mounted and s.unsaved_change]
        if self.service is not None and self.service.started:
            lines += self.service.documents.at_risk()
        return [line for line in lines if line]

    async def action_quit(self) -> None:
        """Quit at once, or ask first when something would be lost (quit anyway / stay) or a reply is being written
        (quit, keeping the reply so far in the chat, marked cancelled / wait for the reply)."""
        from .screens.confirm import ConfirmScreen

        lines = self.unsaved_work()
        writing = any(isinstance(s, MainScreen) and s.streaming for s in self.screen_stack)
        if not lines and not writing:
            self.exit()
            return
        if isinstance(self.screen, ConfirmScreen) and self.screen.id == "confirm-quit":
            return  # already asking
        if lines:
            stops = ["the reply being written stops (its part so far is kept, marked cancelled)"] if writing else []
            question = ("Quitting now loses work:\n" + "\n".join(f"• {line}" for line in [*lines, *stops])
                        + "\n\nQuit anyway?")
            labels = ("Quit anyway", "Stay")
        else:
            question = ("A reply is being written. Quit now (the reply so far is kept in the chat, marked cancelled), "
                        "or wait for the reply?")
            labels = ("Quit now", "Wait for the reply")
        dialog = ConfirmScreen(question, title="Quit?", confirm_label=labels[0], cancel_label=labels[1])
        dialog.id = "confirm-quit"
        await self.push_screen(dialog, self._quit_if)

    async def _quit_if(self, quit_anyway: bool | None) -> None:
        if quit_anyway:
            for screen in [s for s in self.screen_stack if isinstance(s, MainScreen)]:
                await screen.stop_turn()  # the reply so far is saved before the service stops
            self.exit()

    # --- start ------------------------------------------------------------------------------

    @property
    def main_screen(self) -> MainScreen:
        return next(s for s in self.screen_stack if isinstance(s, MainScreen))

    def get_default_screen(self) -> MainScreen:
        return MainScreen(self.config, opened=self.opened)

    def on_mount(self) -> None:
        self._ui_thread = threading.get_ident()
        problems = check_keymap(self.config.keys)
        keymap = {k: v for k, v in self.config.keys.items() if k not in problems}
        self.set_keymap(keymap)
        # The footer finds the palette's hint under this key: a remapped palette keeps its hint.
        # Per app: Textual reads self.COMMAND_PALETTE_BINDING (App, Footer), though it types it a ClassVar.
        palette_key = keymap.get("command_palette", self.COMMAND_PALETTE_BINDING).split(",")[0].strip()
        self.COMMAND_PALETTE_BINDING = palette_key  # type: ignore[misc]
        where = str(self.config.path) if self.config.path else "config"  # a config problem names its file
        for action, problem in problems.items():
            self.notify(f"{where}: [keys] {action}: {problem}", title="Config", severity="warning")
        for title, message in self._startup_warnings:
            self.notify(message, title=title, severity="warning")
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def _install_themes(self) -> None:
        dirs: list[Path | str] = [shipped_themes_dir()]
        if self.config.ui.themes_dir:
            dirs.append(self.config.ui.themes_dir)
        loaded = load_themes(dirs)
        for theme in loaded.themes:
            self.register_theme(theme)
        self._startup_warnings += [("Theme skipped", problem) for problem in loaded.errors]
        remembered = self._remembered("theme")
        wanted = remembered or self.config.ui.theme
        if wanted in self.available_themes:
            self.theme = wanted  # Textual's own way (its watcher restyles once more before the first frame, ~5 ms)
        else:
            where = (f"{self.data_dir / 'state.toml'}: theme" if remembered
                     else f"{self.config.path or 'config'}: [ui] theme")
            self._startup_warnings.append(("Theme", f"{where} {wanted!r} not found; using didactyl-dark"))
            self.theme = "didactyl-dark" if "didactyl-dark" in self.available_themes else "textual-dark"

    def _remembered(self, key: str) -> Any:
        """A runtime choice from <data dir>/state.toml (read here for the first frame)."""
        return read_state(self.data_dir).get(key)

    def _theme_changed(self, theme: Theme) -> None:
        if self.service is not None:
            self.remember("theme", theme.name)

    @work(group="remember", exit_on_error=False)
    async def remember(self, key: str, value: Any) -> None:
        """Keep a runtime choice in state.toml (a file: read and written off the UI loop)."""
        if await asyncio.to_thread(lambda: read_state(self.data_dir).get(key)) != value:
            await asyncio.to_thread(remember, self.data_dir, key, value)

    def first_painted(self) -> None:
        """Called by the main screen once its first frame is on the terminal: now the service may start."""
        if self._first_paint_file:
            record = {"t": time.time(), "litellm": "litellm" in sys.modules,
                      "service": "didactyl_tui.service.app" in sys.modules,
                      "modules": sorted(m for m in sys.modules if m.startswith("didactyl_tui"))}
            import json  # not needed by the first frame itself

            fd = os.open(self._first_paint_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # as every file
            with os.fdopen(fd, "w") as out:
                out.write(json.dumps(record) + "\n")
            self.exit()
            return
        self.start_service()

    @work(exclusive=True, group="service", exit_on_error=False)
    async def start_service(self) -> None:
        from .screens.key_place import settle_key_place

        if not await settle_key_place(self):  # a first run: where the agent's key lives, asked before it is made
            self.exit(message=NO_KEY_MADE)
            return
        main = self.main_screen
        if self.opened is None and self.open_session_id is not None:  # on screen while the service starts
            main.saved_chats.resume(self.open_session_id)
        await main.mount_sidebar()
        try:
            if self.service is None:
                # Imported off the UI thread: the service pulls in crypto and the relay code.
                service_class = await asyncio.to_thread(_service_class)
                self.service = service_class(self.config, data_dir=self.data_dir, env=self.env, answer_dms=True)
            service = self.service
            self._withdraw += [service.permissions.register_asker(self.ask_permission),
                               service.add_listener(self._on_service_event)]
            main.service_attached(service)
            await service.start()
        except DidactylError as exc:
            main.service_failed(exc.one_line())
            raise
        self.service_ready = True
        main.service_started()
        # The model's helper process starts when a model is first needed (a key typed, a dry run, a DM turn); with
        # worker_process = false litellm's import starts here now, in a thread.
        model_client = service.preload_llm()
        if model_client is not None:
            await asyncio.to_thread(model_client.join)
        # What starting (and litellm, when it runs here) loaded is in memory for good now: keep it out of every
        # later full garbage collection, which would otherwise rescan it on the UI loop (~250 ms each, measured).
        gc.freeze()
        from ..freed_memory import release_freed_memory  # not before the first frame

        release_freed_memory()  # and what starting freed goes back to the system (~2 MiB of RSS)

    @on(ChatInput.TypingStarted)
    def warm_views(self) -> None:
        """Load what the first reply and the first history view need (markdown parsing, the data table) on a
        worker thread, so the UI loop does not stop for it (~0.3 s here) when they first appear. Once, when the
        user starts typing: not at start, so an app at rest does not hold them (~3.5 MiB of RSS,
        bench/idle_rss_bench.py); typing a message takes longer than loading them."""
        if not self._views_warming:
            self._views_warming = True
            self.run_worker(_preload_views, thread=True, group="warm-views", exit_on_error=False)

    async def ask_permission(self, request: PermissionRequest) -> Decision:
        """A tool that acts wants to run (an MCP server's, write_file, post_note): the person decides (a dialog: allow
        once, always, or deny; Esc denies)."""
        from ..service.types import Decision
        from .screens.permission import PermissionScreen

        answer: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()

        def decided(decision: Decision | None) -> None:
            if not answer.done():
                answer.set_result(decision if decision is not None else Decision.DENY)

        self.push_screen(PermissionScreen(request), callback=decided)
        return await answer

    @work(exclusive=True, group="tool-permissions", exit_on_error=False)
    async def action_tool_permissions(self) -> None:
        """The tools always allowed, each revocable (they ask again from then on)."""
        from .screens.permission import AlwaysAllowedScreen

        if self.service is None:
            self.notify("The agent is still starting.", title="Tools always allowed")
            return
        gate = self.service.permissions
        revoke = await self.push_screen_wait(AlwaysAllowedScreen(sorted(gate.always)))
        if revoke is not None and gate.revoke(revoke):
            self.notify(f"{revoke} asks again before it runs.", title="Revoked", markup=False)

    def relay_label(self, url: str) -> str:
        """How a relay is named on screen: the embedded one says so."""
        if url in self.relay_labels:
            return self.relay_labels[url]
        if self.service is not None and self.service.started and url == self.service.relays.embedded_url:
            return f"embedded ({url.split('://', 1)[-1]})"
        return url

    # --- service events ---------------------------------------------------------------------------

    def _on_service_event(self, event: ServiceEvent) -> None:
        if threading.get_ident() == self._ui_thread:
            self.service_events.publish(event)
        else:
            self.call_from_thread(self.service_events.publish, event)

    def follow_service(self, node: DOMNode, handler: Callable[[ServiceEvent], None]) -> None:
        """Hand ``node`` every service event (until it is removed); a view's bug is shown, never fatal."""

        def guarded(event: ServiceEvent) -> None:
            try:
                handler(event)
            except Exception as exc:  # a view bug must not take the app (and the user's draft) down
                self.notify(f"{type(exc).__name__}: {exc}", title="Display error", severity="error")

        self.service_events.subscribe(node, guarded)

    # --- errors: one handler for every worker (nothing crashes the app) ---------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is not WorkerState.ERROR:
            return
        error = event.worker.error
        # An error's words may come from outside (a relay's reason, a signer's link): never read as markup.
        if isinstance(error, DidactylError):
            self.notify(" ".join(error.message.split()), title=error.title, severity="error", timeout=8, markup=False)
        else:
            self.notify(f"{type(error).__name__}: {error}", title="Unexpected error", severity="error", timeout=8,
                        markup=False)

    # --- stop ---------------------------------------------------------------------------------------

    async def on_unmount(self) -> None:
        from .streaming import app_stopped

        app_stopped()  # a turn's put-off collection still waiting: the collector as it was
        for withdraw in self._withdraw:
            withdraw()
        if self.service is not None:
            try:
                await asyncio.wait_for(self.service.stop(), STOP_TIMEOUT_S)
            except (TimeoutError, DidactylError):
                pass


def _didactyl_commands() -> type:
    from .commands import DidactylCommands  # textual.command loads with the palette, not before the first frame

    return DidactylCommands


def _preload_views() -> None:
    """Import what the first reply and the first history view need (``DidactylApp.warm_views``)."""
    from markdown_it import MarkdownIt
    from textual.widgets import DataTable, Markdown  # noqa: F401

    from .screens import memory_history  # noqa: F401
    from .widgets import message_entry  # noqa: F401

    MarkdownIt("gfm-like").parse("# warm\n\n- *the* [parser](https://example.org) `once`\n")  # its lazy setup


def _service_class() -> type[AppService]:
    from ..service.app import AppService  # crypto, relays, SQLite: loaded after the first frame

    return AppService


def run_app(config: Config, *, data_dir: Path, env: Mapping[str, str] | None = None,
            opened: StoredTail | None = None) -> None:
    """Open the TUI (``didactyl`` with no arguments; ``opened``: on that stored conversation)."""
    # What is loaded by now (Textual, our modules, the config) lives as long as the process: keep it out of
    # every later full garbage collection, which otherwise rescans it (one landed in the first frame, ~12 ms).
    gc.freeze()
    DidactylApp(config, data_dir=data_dir, env=env, opened=opened).run()
