"""Finding and ending the shared relay processes a test started (see nostr/embedded_relay/shared.py).

A relay process outlives the process that started it (that is its job), so a test that starts one —
directly, through AppService, or through a CLI process — must end it: ``reap_shared_relays`` does so for
every relay whose data dir lies under the test's ``tmp_path``, with bounded waits. Register it in
conftest.py (autouse) once the service starts its relay through ``ensure_shared_relay``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from didactyl_tui.nostr.embedded_relay.lockfile import pid_running
from didactyl_tui.nostr.embedded_relay.spawn import DAEMON_MODULE


def relay_pids(under: Path) -> list[int]:
    """Live relay processes whose data dir is under ``under`` (read from /proc command lines)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if DAEMON_MODULE.encode() not in argv:
            continue
        try:
            data_dir = argv[argv.index(b"--data-dir") + 1].decode()
        except (ValueError, IndexError):
            continue
        if Path(data_dir).is_relative_to(under) and pid_running(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def kill_shared_relays(under: Path, timeout: float = 5.0) -> list[int]:
    """SIGTERM every relay process under ``under`` (SIGKILL after ``timeout``); the pids it found."""
    pids = relay_pids(under)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        if not wait_gone(pid, timeout):
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid, timeout)
    return pids


@pytest.fixture
def reap_shared_relays(tmp_path: Path) -> Iterator[None]:
    yield
    kill_shared_relays(tmp_path)
    assert relay_pids(tmp_path) == [], "a shared relay process survived SIGKILL"


@contextlib.contextmanager
def database_held(db_path: Path) -> Iterator[None]:
    """Hold the relay database's write lock: a relay restarting inside its process (a reload) has closed its port
    and waits here, before it listens again and rewrites relay.lock, until the block ends. (Give the reload a
    ``db_busy_timeout`` longer than the block, or the relay gives the restart up and stops.)"""
    db = sqlite3.connect(db_path, timeout=30, isolation_level=None, check_same_thread=False)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
        db.execute("ROLLBACK")
    finally:
        db.close()


def request_reload(data_dir: Path, pid: int, options: dict[str, object]) -> None:
    """What ensure_shared_relay(reconfigure=True) does to a running relay: new options, then SIGUSR1."""
    from didactyl_tui.nostr.embedded_relay.options import OPTIONS_FILE, write_request

    write_request(data_dir / OPTIONS_FILE, options)
    os.kill(pid, signal.SIGUSR1)
