"""The real console entry (``python -m didactyl_tui``) for tests: its environment in a tmp dir, one run, one
``didactyl serve`` process; shared by tests/cli/ and the service tests that run a command beside the app."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from model_helper_template import ENV as HELPER_ENV
from tui_support import TEST_KEY

NO_BACKEND = '[relays]\nembedded_port = 0\ntimeout_s = 2.0\n[memory]\nbackend = "none"\n'


def outside_env() -> dict[str, str]:
    """This process's environment without the caller's didactyl settings (``$DIDACTYL_*``), but for the suite's
    model helper command (``$DIDACTYL_TEST_MODEL_HELPER``, set by conftest)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("DIDACTYL_") or k == HELPER_ENV}


def cli_env(tmp_path: Path, config: str = "[relays]\nembedded_port = 0\ntimeout_s = 2.0\n", **extra: str):
    """Own data and config dirs in ``tmp_path``, no ``$DIDACTYL_*`` of the caller's, and ``config`` as config.toml."""
    cfg_dir = tmp_path / "config" / "didactyl"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    (cfg_dir / "config.toml").write_text(config)
    env = outside_env()
    env.update(DIDACTYL_DATA_DIR=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "xdg-data"), HOME=str(tmp_path / "home"))
    env.update(extra)
    return env


def cli_env_on(tmp_path: Path, data: Path) -> dict[str, str]:
    """A command on an app's data dir ``data``, with the app's key (tui_support.TEST_KEY) and no memory backend."""
    return cli_env(tmp_path, NO_BACKEND, DIDACTYL_DATA_DIR=str(data), DIDACTYL_NSEC=TEST_KEY.nsec())


def didactyl(env: dict[str, str], *args: str, stdin: str | None = None, importtime: bool = False):
    """One run of the console entry in a subprocess (Python's start-up included: keep them few)."""
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "didactyl_tui", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=60)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


class Served:
    """One ``didactyl serve`` process; its stderr lines are kept for the assertions."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.lines = env, []
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "didactyl_tui", "serve", env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        await self.wait_for("serving as", 60)

    async def wait_for(self, text: str, timeout: float, *, nth: int = 1) -> str:
        """The ``nth`` line of serve's log with ``text`` (one read already counts): the second answer is waited for
        with ``nth=2``, not found in the first one's line."""
        assert self.proc is not None and self.proc.stderr is not None
        found = [line for line in self.lines if text in line]

        async def read() -> str:
            while True:
                raw = await self.proc.stderr.readline()
                if not raw:
                    raise AssertionError(f"serve ended before {text!r} #{nth}:\n" + "".join(self.lines))
                self.lines.append(raw.decode())
                if text in self.lines[-1]:
                    found.append(self.lines[-1])
                    if len(found) == nth:
                        return self.lines[-1]

        if len(found) >= nth:
            return found[nth - 1]
        return await asyncio.wait_for(read(), timeout)

    async def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rest = await asyncio.wait_for(self.proc.stderr.read(), 60)
        self.lines.append(rest.decode())
        return await asyncio.wait_for(self.proc.wait(), 60)

    @property
    def log(self) -> str:
        return "".join(self.lines)
