"""Idle memory of ``didactyl`` with no model configured, next to a bare Textual app in the same run (issue #13).

Each app runs as a subprocess on a pseudo-terminal (so Textual really renders and the service really starts:
key, embedded relay, pool, memories). ``--after`` seconds after launch (default 5) the resident set size
(VmRSS) of the process is read from /proc, and the process is stopped. Runs alternate between the two
apps; medians are reported. Target (issue #13): ≤ 130 MiB with no model (litellm, ~200 MiB, is then not
imported ahead of time: ``agent.llm.should_preload``). The embedded relay runs as a process of its own and is
not counted (the bench config lets it exit 2 s after the app, so no process is left behind).

    python bench/idle_rss_bench.py [--runs 3] [--after 5] [--check]

``--check`` exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

TARGET_MIB = 130.0
COLS, ROWS = 120, 36

BARE_APP = """
from textual.app import App
from textual.widgets import Footer, Static

class Bare(App):
    def compose(self):
        yield Static("a bare Textual app")
        yield Footer()

Bare().run()
"""

DIDACTYL_CONFIG = """
[llm]
model = ""
[relays]
embedded_port = 0
embedded_idle_exit_s = 2
[memory]
backend = "none"
[agent]
publish_profile = false
"""


def _drain(fd: int) -> None:
    """Read the child's terminal output so it never blocks on a full pty buffer."""
    while True:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def run_once(argv: list[str], env: dict[str, str], after: float) -> dict[str, float]:
    """Launch ``argv`` on a pty, wait ``after`` seconds, read its RSS (and whether litellm is mapped), stop it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    reader = threading.Thread(target=_drain, args=(master,), daemon=True)
    reader.start()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            start_new_session=True)
    os.close(slave)
    try:
        time.sleep(after)
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(argv[:3])} exited ({proc.returncode}) before {after:g} s")
        rss = rss_mib(proc.pid)
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        return {"rss": rss, "litellm": float("litellm" in maps or "tiktoken" in maps)}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        os.close(master)
        reader.join(timeout=1)


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIDACTYL_", "TEXTUAL"))}
    config = home / "config.toml"
    config.write_text(DIDACTYL_CONFIG)
    env.update({
        "TERM": "xterm-256color", "COLUMNS": str(COLS), "LINES": str(ROWS),
        "DIDACTYL_CONFIG": str(config), "DIDACTYL_DATA_DIR": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
    })
    return env


def measure(runs: int, after: float) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {"bare": [], "didactyl": []}
    with tempfile.TemporaryDirectory(prefix="didactyl-rss-") as tmp:
        home = Path(tmp)
        env = environment(home)
        subprocess.run([sys.executable, "-m", "didactyl_tui", "keygen"], env=env, capture_output=True,
                       check=True, timeout=60)
        commands = {
            "bare": [sys.executable, "-c", BARE_APP],
            "didactyl": [sys.executable, "-m", "didactyl_tui"],
        }
        for _ in range(runs):
            for name, argv in commands.items():
                results[name].append(run_once(argv, env, after))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--after", type=float, default=5.0, help="seconds after launch to read the RSS")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args(argv)

    results = measure(args.runs, args.after)
    bare = statistics.median(r["rss"] for r in results["bare"])
    ours = statistics.median(r["rss"] for r in results["didactyl"])
    litellm = any(r["litellm"] for r in results["didactyl"])
    print(f"RSS {args.after:g} s after start, median of {args.runs} runs (no model configured):")
    print(f"  bare Textual app   {bare:7.1f} MiB")
    print(f"  didactyl           {ours:7.1f} MiB   ({ours / bare:.2f}x the bare app; target <= {TARGET_MIB:g} MiB)")
    print(f"  litellm imported:  {'yes' if litellm else 'no'}")
    ok = ours <= TARGET_MIB and not litellm
    print("target met" if ok else "TARGET MISSED")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
