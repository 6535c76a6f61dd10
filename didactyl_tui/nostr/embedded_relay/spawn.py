"""Starting the shared relay process detached (:mod:`.shared` decides when): its command line, its environment,
its log (rotated when big), a thread that reaps it, and the log's last line for a one-line error."""

from __future__ import annotations

import contextlib
import os
import re
import site
import subprocess
import sys
import threading
from pathlib import Path

from .lockfile import open_private

DAEMON_MODULE = f"{__package__}.daemon"
MAX_LOG_KEEP_BYTES = 1024 * 1024  # the log is rotated (one old copy kept) when bigger at a start
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def relay_command(data_dir: Path, db: Path, host: str, port: int, idle_exit_s: float, options: str) -> list[str]:
    return [sys.executable, "-m", DAEMON_MODULE, "--data-dir", str(data_dir), "--db", str(db), "--host", host,
            "--port", str(port), "--idle-exit", repr(float(idle_exit_s)), "--relay-options", options]


def _child_env() -> dict[str, str]:
    """This process's environment; when our package comes from a source tree (not site-packages), that
    tree goes first on the path, so the relay runs the same code whatever the working directory."""
    env = dict(os.environ)
    root = Path(__file__).resolve().parents[3]
    installed = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root not in installed:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    return env


def _open_log(path: Path) -> int:
    with contextlib.suppress(OSError):
        if path.stat().st_size > MAX_LOG_KEEP_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
    return open_private(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def spawn(command: list[str], cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
    log_fd = _open_log(log_path)
    try:
        # A session of its own: Ctrl-C in the terminal and the app's exit do not reach the relay.
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, cwd=cwd,
                                env=_child_env(), start_new_session=True, close_fds=True)
    finally:
        os.close(log_fd)
    # The relay outlives its use here; a daemon thread reaps it whenever it exits (no zombie).
    threading.Thread(target=proc.wait, name=f"reap-relay-{proc.pid}", daemon=True).start()
    return proc


def terminate(proc: subprocess.Popen[bytes], timeout: float = 3.0) -> None:
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)


def last_line(path: Path, tail: int = 2048) -> str:
    """The log's last line, cleaned of control characters and shortened, for a one-line error."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return _CONTROL.sub("", lines[-1]).strip()[:200] if lines else ""
