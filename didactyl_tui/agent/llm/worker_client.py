"""The app's side of the model client's process (``llm.worker``): one process shared by every model call.

It is started when a model is first needed (``llm.start_worker()``: the first key typed, a dry run, a turn) or by
the first call, and stops after :attr:`LlmWorker.idle_exit_s` with no call (``[llm] helper_idle_exit_s``: litellm's
~200 MiB are not kept for an app at rest); the next need starts a new one. When it dies (killed, crashed), the calls
it was serving fail with one readable line and the next call starts a new one. The pipe is read by one thread,
which hands each read's lines to the event loop that asked for them (one wake-up per read, not per chunk); requests
are written by one thread, so a large prompt never blocks a loop. Any event loop may call: the TUI's, ``didactyl
serve``'s, a test's.

Token counts and the model table's context window are asked of the helper too (:meth:`LlmWorker.count_texts`,
:meth:`LlmWorker.context_window`: a short blocking round trip), so the app never imports litellm or a tokenizer of its
own: litellm's import costs ~200 MiB, and it would be loaded twice. Such a round trip is asked from a worker thread,
never on an event loop's thread: there :meth:`LlmWorker.ask` refuses at once (the caller falls back to an estimate,
or to no window) rather than freeze the loop for up to :data:`ASK_TIMEOUT_S`. What views read on the loop is what
was asked before (:meth:`LlmWorker.known_context_window`).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...terminal_text import one_line
from .errors import LlmError
from .worker_wire import chunks, settings_data

if TYPE_CHECKING:
    from .types import LlmChunk, LlmSettings

log = logging.getLogger("didactyl.llm")

HELPER_COMMAND = [sys.executable, "-m", "didactyl_tui.agent.llm.worker"]
# Test-only: the suite's helper command, a JSON list (a helper forked from one that imported litellm already, so the
# suite's many helpers pay that import once: tests/model_helper_template.py, CONTRIBUTING.md). Nothing else sets it.
TEST_HELPER_ENV = "DIDACTYL_TEST_MODEL_HELPER"
MAX_LINE_BYTES = 64 * 1024 * 1024  # one chunk from the helper; a longer line means it is broken: it is stopped
ASK_TIMEOUT_S = 2.0  # a count or the model table's answer (milliseconds once the helper is ready)
COUNT_CHARS_PER_S = 500_000  # beyond ASK_TIMEOUT_S, a batch of counts may take 1 s per this many characters
FIRST_ANSWER_GRACE_S = 120.0  # the helper's first call imports litellm (~8 s here, more under load)
ANSWER_GRACE_S = 10.0  # beyond the call's own timeouts, which the helper enforces
_refusals = 0  # blocking requests refused on an event loop's thread (the first is logged as a warning)
STDERR_TAIL_LINES = 20  # what is kept of the helper's stderr (the last line names why it died)
MAX_STDERR_LINE_BYTES = 4096


class _Call:
    """One model call's inbox on the event loop that made it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.inbox: asyncio.Queue[list[dict[str, Any]]] = asyncio.Queue()

    def post(self, messages: list[dict[str, Any]]) -> None:
        try:
            self.loop.call_soon_threadsafe(self.inbox.put_nowait, messages)
        except RuntimeError:  # that loop has closed: nobody is waiting
            pass


class _Answer:
    """The one answer to a count or info request, waited for by a thread (a worker thread: never a loop's)."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.message: dict[str, Any] = {}

    def post(self, messages: list[dict[str, Any]]) -> None:
        if not self.arrived.is_set():
            self.message = messages[0]
            self.arrived.set()


class LlmWorker:
    """The helper process and the two threads that talk to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._calls: dict[int, tuple[_Call | _Answer, subprocess.Popen[bytes]]] = {}  # each call, its helper
        self._windows: dict[str, int | None] = {}  # the helper's context window of each model asked about
        self._ids = itertools.count(1)
        self._outbox: queue.Queue[tuple[subprocess.Popen[bytes], bytes] | None] = queue.Queue()
        self._writer: threading.Thread | None = None
        self.ready = threading.Event()  # the current helper has imported litellm
        self.settled = threading.Event()  # ... or failed to, or died: waiting for it is over
        self.idle_exit_s = 0.0  # a helper unused this long is stopped (0: kept); each call brings its setting
        self._last_used = time.monotonic()

    def start(self, idle_exit_s: float | None = None) -> None:
        """Start the helper unless it runs (idempotent, thread-safe); it counts as used now. ``idle_exit_s``: how
        long it may then stay unused (None: as set before)."""
        with self._lock:
            if idle_exit_s is not None:
                self.idle_exit_s = idle_exit_s
            self._ensure()
            self._last_used = time.monotonic()

    def _ensure(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return proc
        env = dict(os.environ)
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        root = str(Path(__file__).resolve().parents[2])  # this package's own copy, whatever sys.path says
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.ready.clear()
        self.settled.clear()
        proc = subprocess.Popen(
            _helper_command(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            start_new_session=True,  # the terminal's Ctrl-C is the app's to handle, not the helper's
            bufsize=0,
        )
        self._proc = proc
        tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        errors = threading.Thread(target=_read_stderr, args=(proc, tail), name="llm-worker-stderr", daemon=True)
        errors.start()
        threading.Thread(target=self._read, args=(proc, tail, errors), name="llm-worker-reader", daemon=True).start()
        if self._writer is None:
            self._writer = threading.Thread(target=self._write, name="llm-worker-writer", daemon=True)
            self._writer.start()
        self._last_used = time.monotonic()
        threading.Thread(target=self._stop_when_idle, args=(proc,), name="llm-worker-idle", daemon=True).start()
        log.info("model helper process %d started", proc.pid)
        return proc

    def _write(self) -> None:
        while True:
            item = self._outbox.get()
            if item is None:
                return
            proc, data = item
            try:
                assert proc.stdin is not None
                if data:
                    proc.stdin.write(data)
                else:  # the helper is done with: it exits when its stdin closes (after what was sent before)
                    proc.stdin.close()
            except (OSError, ValueError):
                pass  # it died: its reader fails the calls it served

    def _stop_when_idle(self, proc: subprocess.Popen[bytes]) -> None:
        """(Its own thread, one per helper.) Stop ``proc`` once no call has used it for :attr:`idle_exit_s`. Decided
        under the lock that starts calls: a call either finds it running and is served, or starts a new one."""
        while True:
            with self._lock:
                if self._proc is not proc or proc.poll() is not None:
                    return
                busy = any(served_by is proc for _, served_by in self._calls.values())
                limit = self.idle_exit_s
                left = limit - (time.monotonic() - self._last_used)
                if limit > 0 and not busy and left <= 0:
                    self._proc = None
                    self.ready.clear()
                    self.settled.clear()
                    self._outbox.put((proc, b""))
                    log.info("model helper process %d stopped: unused for %g s", proc.pid, limit)
                    return
            time.sleep(min(max(left, 0.05), 5.0) if limit > 0 and not busy else 1.0)

    def _read(self, proc: subprocess.Popen[bytes], tail: collections.deque[str], errors: threading.Thread) -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        pending = bytearray()
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                break
            if not data:
                break
            pending += data
            end = pending.rfind(b"\n")
            if end < 0:
                if len(pending) > MAX_LINE_BYTES:
                    log.warning("the model helper sent a line over %d bytes: stopped", MAX_LINE_BYTES)
                    proc.kill()
                    break
                continue
            lines, pending = bytes(pending[:end]).split(b"\n"), pending[end + 1:]
            batches: dict[int, list[dict[str, Any]]] = {}
            for line in lines:
                try:
                    message = json.loads(line)
                    batches.setdefault(int(message["id"]), []).append(message)
                except (ValueError, KeyError, TypeError):
                    continue
            started = batches.pop(0, None)
            if started is not None:  # litellm is imported there (or failed to be): a call now starts at once
                if any(m.get("ready") is True for m in started):
                    self.ready.set()
                self.settled.set()
            with self._lock:
                targets = [(self._calls.get(i), messages) for i, messages in batches.items()]
            for entry, messages in targets:
                if entry is not None and entry[1] is proc:
                    entry[0].post(messages)
            time.sleep(0.001)  # let a few more chunks gather: one wake-up of the loop per millisecond at most
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
        errors.join(1.0)  # its last words
        with self._lock:
            if self._proc is proc:
                self._proc = None
                self.settled.set()
            orphans = [call for call, served_by in self._calls.values() if served_by is proc]
        why = _last_words(tail)
        for call in orphans:
            call.post([{"gone": why}])

    @property
    def running(self) -> bool:
        proc = self._proc
        return proc is not None and proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The helper's process id while it runs (what bench/ measures)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def ask(self, request: dict[str, Any], timeout: float = ASK_TIMEOUT_S, *, litellm: bool = True) -> dict[str, Any]:
        """One request and its answer (blocks up to ``timeout``: from a worker thread). Raises :class:`LlmError` when
        called on a thread that runs an event loop (it would freeze it), when the helper is not running (or, for a
        request that needs ``litellm``, has not imported it), or does not answer in time, or answers with an
        error."""
        if _on_event_loop():
            global _refusals
            _refusals += 1
            (log.warning if _refusals == 1 else log.debug)(
                "a %s request to the model helper was refused: it was asked on an event loop's thread (%d so far)",
                request.get("op"), _refusals)
            raise LlmError("The model's helper process is asked from a worker thread, not an event loop.",
                           "connection")
        answer = _Answer()
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None or (litellm and not self.ready.is_set()):
                raise LlmError("The model's helper process is not ready.", "connection")
            call_id = next(self._ids)
            self._calls[call_id] = (answer, proc)
            self._last_used = time.monotonic()
        try:
            self._send(proc, {**request, "id": call_id})
            if not answer.arrived.wait(timeout):
                raise LlmError(f"The model's helper process did not answer within {timeout:g} s.", "timeout")
        finally:
            with self._lock:
                self._calls.pop(call_id, None)
                self._last_used = time.monotonic()
        message = answer.message
        if "error" in message or "gone" in message:
            raise LlmError("The model's helper process could not answer.", "connection")
        return message

    def count_tokens(self, text: str) -> int:
        """The count of ``text`` made in the helper (``llm.tokens``: there, the encoding litellm shares)."""
        return self.count_texts([text])[0]

    def count_texts(self, texts: list[str]) -> list[int]:
        """The counts of ``texts``, in order, made in the helper in one round trip (blocking: from a worker
        thread)."""
        timeout = ASK_TIMEOUT_S + sum(map(len, texts)) / COUNT_CHARS_PER_S
        counts = self.ask({"op": "count", "texts": list(texts)}, timeout, litellm=False)["counts"]
        return [int(n) for n in counts]

    def known_context_window(self, model: str) -> int | None:
        """What :meth:`context_window` answered for ``model`` before (None: unknown, or not asked yet); never waits."""
        return self._windows.get(model)

    def context_window(self, model: str) -> int | None:
        """The context window litellm's model table gives ``model`` (asked once per model; blocking: from a worker
        thread); None when unknown, or when the helper cannot say yet (not started, still importing litellm)."""
        if model in self._windows:
            return self._windows[model]
        try:
            window = self.ask({"op": "info", "model": model})["info"].get("context_window")
        except (LlmError, KeyError, AttributeError):
            return None
        self._windows[model] = int(window) if isinstance(window, int | float) and window > 0 else None
        return self._windows[model]

    def _send(self, proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
        self._outbox.put((proc, json.dumps(message, separators=(",", ":")).encode() + b"\n"))

    async def stream(
        self,
        settings: LlmSettings,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> AsyncGenerator[LlmChunk, None]:
        call = _Call(asyncio.get_running_loop())
        call_id = next(self._ids)
        with self._lock:
            self.idle_exit_s = settings.helper_idle_exit_s
            try:
                proc = self._ensure()
            except OSError as exc:  # e.g. out of processes or descriptors
                raise LlmError(f"The model's helper process could not start ({exc.strerror or exc}).",
                               "connection") from None
            self._calls[call_id] = (call, proc)
        finished = False
        try:
            self._send(proc, {
                "op": "stream", "id": call_id, "settings": settings_data(settings),
                "messages": [dict(m) for m in messages], "tools": [dict(t) for t in tools] if tools else None,
                "env": dict(os.environ),
            })
            grace = FIRST_ANSWER_GRACE_S
            while True:
                try:
                    async with asyncio.timeout(settings.timeout_s + settings.max_retry_wait_s + grace):
                        batch = await call.inbox.get()
                except TimeoutError:
                    raise LlmError(f"The model did not answer within {settings.timeout_s:g} s.", "timeout") from None
                grace = ANSWER_GRACE_S
                for chunk in chunks(batch):
                    if chunk is None:
                        finished = True
                        return
                    yield chunk
        finally:
            with self._lock:
                self._calls.pop(call_id, None)
                self._last_used = time.monotonic()
            if not finished:
                self._send(proc, {"op": "cancel", "id": call_id})


def _on_event_loop() -> bool:
    """Whether this thread runs an event loop (the UI's, serve's, a test's): no place for a blocking wait."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _helper_command() -> list[str]:
    """``HELPER_COMMAND``, or the test suite's command from ``$DIDACTYL_TEST_MODEL_HELPER`` (the helper's own code
    runs either way: only how it is started differs)."""
    override = os.environ.get(TEST_HELPER_ENV)
    if override:
        try:
            command = json.loads(override)
            if isinstance(command, list) and command and all(isinstance(part, str) for part in command):
                return command
        except ValueError:
            pass
        log.warning("$%s is not a JSON list of strings: the helper starts as usual", TEST_HELPER_ENV)
    return HELPER_COMMAND


def _read_stderr(proc: subprocess.Popen[bytes], tail: collections.deque[str]) -> None:
    """Keep the helper's last lines of stderr (a crash's last words; litellm's warnings), never more."""
    assert proc.stderr is not None
    for raw in iter(lambda: proc.stderr.readline(MAX_STDERR_LINE_BYTES), b""):  # type: ignore[union-attr]
        line = raw.decode("utf-8", "replace").strip()
        if line:
            tail.append(line)


def _last_words(tail: collections.deque[str]) -> str:
    """The last line a dead helper wrote (e.g. "MemoryError"), made safe for one line on a terminal."""
    last = tail[-1] if tail else ""
    return one_line(last)[:200]


_worker = LlmWorker()


def worker() -> LlmWorker:
    """The helper process of this app."""
    return _worker
