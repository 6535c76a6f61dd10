"""Helpers for the TUI tests: a real AppService (embedded relay on a free port, tmp data dir) behind the app."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from didactyl_tui.config import Config
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.service.app import AppService
from didactyl_tui.tui.app import DidactylApp

# Derived, never written as an nsec literal: the tests grep screens and snapshots for it.
TEST_KEY = SecretKey.from_hex("01" * 32)
NOW = 1_750_000_000.0
LLM_KEY_VAR = "DIDACTYL_TEST_LLM_KEY"
EMBEDDED_LABEL = "embedded relay"
SIZE = (130, 40)


class Clock:
    """A settable wall clock for the service (events' created_at, assemblies' times)."""

    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_config(*, llm_base_url: str | None = None, model: str = "openai/stub-model", urls: list[str] | None = None,
                short_limit: int = 8000, long_limit: int = 32000, publish_profile: bool = True) -> Config:
    cfg = Config()
    cfg.relays.embedded.enabled = True
    cfg.relays.embedded_port = 0
    cfg.relays.urls = list(urls or [])
    cfg.relays.timeout_s = 2.0
    cfg.llm.model = model
    cfg.llm.api_base = llm_base_url or ""
    cfg.llm.api_key_env = LLM_KEY_VAR
    cfg.llm.timeout_s = 5.0
    cfg.llm.max_retries = 0
    cfg.memory.short_term_max_chars = short_limit
    cfg.memory.long_term_max_chars = long_limit
    cfg.memory.backend = "none"
    cfg.agent.publish_profile = publish_profile
    cfg.agent.name = "didactyl-test"
    cfg.agent.about = "A test agent."
    return cfg


def make_env(**extra: str) -> dict[str, str]:
    env = {
        "DIDACTYL_NSEC": TEST_KEY.nsec(),
        LLM_KEY_VAR: "not-a-real-key",
        "XDG_CONFIG_HOME": "/home/user/.config",
        "HOME": "/home/user",
    }
    env.update(extra)
    return env


class LabelledApp(DidactylApp):
    """The real app; the embedded relay (on a random port) gets a fixed label so screens are deterministic."""

    def relay_label(self, url: str) -> str:
        if self.service is not None and url == self.service.relays.embedded_url:
            return EMBEDDED_LABEL
        return super().relay_label(url)


def make_app(data_dir: Path, config: Config, *, env: dict[str, str] | None = None,
             clock: Callable[[], float] | None = None) -> LabelledApp:
    env = make_env() if env is None else env
    service = AppService(config, data_dir=data_dir, env=env, clock=clock or Clock())
    return LabelledApp(config, data_dir=data_dir, env=env, service=service)


async def wait_for(pilot: Any, predicate: Callable[[], Any], timeout: float = 10.0,
                   what: str | Callable[[], str] = "") -> Any:
    """Let the app run until ``predicate()`` is truthy; fail with ``what`` after ``timeout`` seconds.
    ``predicate`` may be a coroutine function (a question to the service).

    Between the checks the app simply runs on the shared loop (its messages, timers and paints go on); once the
    predicate holds after a wait, ``pilot.pause()`` lets the screen catch up before the caller goes on (unless the
    app is quitting). A pause at
    every check posted a callback to each widget on screen and forced a paint: ~15 ms of CPU every 50 ms waited."""
    deadline = time.monotonic() + timeout
    waited = False
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            # A closing app never settles: the screen's widgets are closed before they answer the pause's
            # callbacks, and the pilot waits its 30 s (seen under load, waiting for an app to quit).
            if waited and not pilot.app._exit:
                await pilot.pause()
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {(what() if callable(what) else what) or predicate}")
        waited = True
        await asyncio.sleep(0.05)


async def click(pilot: Any, target: Any, timeout: float = 10.0) -> None:
    """Click ``target`` (a widget, or a selector on the screen on top) as a person would: once it is on screen,
    where it stays; and fail unless the click landed on it.

    ``Pilot.click`` reads the target's place before it lets the app run, and when nothing is there it clicks the
    screen's corner and returns False. Right after a widget is mounted or a screen pushed (an error entry at the end
    of a turn, a dialog's buttons) the layout may not have run yet (under load the screen's refresh comes later:
    ``pilot.press`` and a ``wait_for`` whose fact already held do not wait for it), or a scroll to the end is still
    to move it. So first: its region is the same at two looks with the app running between them, and the widget
    hit there is the target itself (not a toast over it)."""
    from textual.css.query import NoMatches
    from textual.errors import NoWidget

    app = pilot.app
    seen: list[Any] = [None, None]  # the target and its region at the previous look

    def placed() -> Any:
        try:
            widget = app.screen.query_one(target) if isinstance(target, str) else target
        except NoMatches:
            return None
        region = widget.region
        try:
            hit = app.get_widget_at(*region.offset)[0] if region else None
        except NoWidget:
            hit = None
        look = [widget, region if hit is widget else None]
        steady = look[1] is not None and look == seen
        seen[:] = look
        return widget if steady else None

    widget = await wait_for(pilot, placed, timeout, lambda: f"{target!r} on screen, in one place ({seen[1]})")
    assert await pilot.click(widget), f"the click on {widget!r} at {widget.region} landed elsewhere"


async def save_followed(pilot: Any, name: str) -> None:
    """Wait for what follows a save in the editor: its version recorded in the history (on a worker thread) and
    the messages that came of it handled."""
    from didactyl_tui.service.types import DocumentKey

    service, key = pilot.app.service, DocumentKey.parse(name)

    async def recorded() -> bool:
        saved = service.documents.snapshot(key).event_id
        return saved is not None and saved in [v.event_id for v in await service.documents.history(key)]

    await wait_for(pilot, recorded, 10, f"the {key} save in the history")
    await pilot.wait_for_scheduled_animations()


async def started(pilot: Any) -> None:
    app = pilot.app
    await wait_for(pilot, lambda: app.service_ready, 30, "the service to start")
    await pilot.pause()


def frames_showing(app: Any, seen: Callable[[], Any]) -> list[Any]:
    """From now on, note ``seen()`` each time ``app`` writes a frame (Textual's own ``App._display``)."""
    frames: list[Any] = []
    display = app._display

    def noted(screen: Any, renderable: Any) -> None:
        frames.append(seen())
        display(screen, renderable)

    app._display = noted
    return frames


def screen_text(app: Any) -> str:
    """Everything on screen as plain text lines, one character per cell (a wide character is followed by a space
    for the cell it also covers), trailing spaces and blank last lines dropped.

    Rendered as Textual's ``export_screenshot`` renders the screen (the same compositor call, dialogs over the
    screens behind them), then printed as plain text: a third of the SVG export's CPU, which matters in a polled
    predicate. Without that call (another Textual), the SVG export's text runs are read instead."""
    compositor = getattr(app.screen, "_compositor", None)
    if compositor is None or not hasattr(compositor, "render_update"):
        return _svg_screen_text(app)
    from rich.cells import cell_len
    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), color_system=None, record=True,
                      legacy_windows=False, safe_box=False)
    console.print(compositor.render_update(full=True, screen_stack=app._background_screens, simplify=True))
    lines = []
    for line in console.export_text(styles=False).splitlines():
        lines.append("".join(ch + " " * (cell_len(ch) - 1) for ch in line.replace("\xa0", " ")).rstrip())
    return "\n".join(lines).rstrip("\n")


def _svg_screen_text(app: Any) -> str:
    import html
    import re

    from rich.cells import cell_len

    cell_w = 12.2  # rich's export: 0.61 em at 20 px per cell
    rows: dict[float, dict[int, str]] = {}
    svg = app.export_screenshot()
    for x, y, text in re.findall(r'<text class="[^"]*-r\d+" x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>', svg):
        row = rows.setdefault(float(y), {})
        col = round(float(x) / cell_w)
        for ch in html.unescape(text).replace("\xa0", " "):
            row[col] = ch
            col += max(1, cell_len(ch))
    lines = []
    for y in sorted(rows):
        cells = rows[y]
        lines.append("".join(cells.get(c, " ") for c in range(max(cells) + 1)).rstrip())
    return "\n".join(lines)


class ThreadedLlmStub:
    """The LLM stub server on its own thread and loop, for snapshot tests (snap_compare runs its own loop)."""

    def __init__(self) -> None:
        import threading

        from llm_stub import LlmStub

        self.stub = LlmStub()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="llm-stub", daemon=True)

    def __enter__(self) -> Any:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.stub.start(), self._loop).result(10)
        return self.stub

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.stub.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


class LoopIoWatch:
    """Which SQLite calls, NIP-44 decryptions and model helper round trips run on the UI loop's thread while it watches.

    A profile hook on the main thread only (worker threads are not watched): every C call into ``sqlite3``,
    every NIP-44 encryption or decryption and Schnorr signature, and every blocking request to the model helper
    (``LlmWorker.ask``: a token count or the model table, a wait of up to 2 s) is noted with the caller that made
    it. Unlike a time budget this does not depend on how busy the machine is: the call is there or it is not.
    """

    # (file, function): NIP-44 both ways and Schnorr signing (verification of incoming events is the relay
    # client's, rate-limited at the pool's edge, and not watched here); the model helper's blocking round trip (noted
    # when it is entered: the client refuses it on a loop's thread, which a user would not see), and the two doors
    # to it, which block whenever their answer is not memoized yet: a batch of counts, the model's context window.
    WATCHED = {("nip44.py", "encrypt"), ("nip44.py", "decrypt"), ("keys.py", "sign"), ("worker_client.py", "ask"),
               ("tokens.py", "count_texts"), ("client.py", "context_window")}
    WATCHED_NAMES = {name for _, name in WATCHED}

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._previous: Any = None

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        if len(self.calls) >= 20:
            return
        if event == "c_call" and {"sqlite3", "_sqlite3"} & {getattr(arg, "__module__", None),
                                                             type(getattr(arg, "__self__", None)).__module__}:
            self.calls.append(f"sqlite3 {getattr(arg, '__qualname__', arg)} from {_where(frame)}")
        elif event == "call" and frame.f_code.co_name in self.WATCHED_NAMES and \
                (Path(frame.f_code.co_filename).name, frame.f_code.co_name) in self.WATCHED:
            self.calls.append(f"{frame.f_code.co_name} from {_where(frame.f_back)}")

    def __enter__(self) -> LoopIoWatch:
        self._previous = sys.getprofile()
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._previous)


def _where(frame: Any) -> str:
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}" if frame else "?"


class LoopLagProbe:
    """How long the UI loop went without reaching a timer: a task asks to wake every ``interval`` seconds and
    notes, per wake-up, the main thread's CPU time since the last one. Counting CPU time rather than wall time,
    a machine too busy to schedule us (2 shared cores) does not look like a blocked loop; a blocking call on
    the loop (SQLite, decryption, parsing a thousand versions) does."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.worst_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            before = time.thread_time()
            await asyncio.sleep(self.interval)
            self.worst_s = max(self.worst_s, time.thread_time() - before)

    def start(self) -> LoopLagProbe:
        self.worst_s = 0.0
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def stop(self) -> float:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return self.worst_s
