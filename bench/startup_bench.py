"""Time to the first painted screen of ``didactyl`` against a bare Textual app, measured in the same run.

Each app runs as a subprocess on a pseudo-terminal (so Textual really renders), with
``DIDACTYL_FIRST_PAINT_FILE`` set: on its first painted frame the app writes the wall-clock time there (plus
whether litellm or the service had been imported by then) and exits. The bare app does the same from its
own first refresh. Runs alternate between the two; medians are reported. Targets (issue 4): ≤ 0.5 s and
≤ 1.5× the bare app.

    python bench/startup_bench.py [--runs 7] [--check]

``--check`` exits 1 when a target is missed (machines here are noisy: trust the ratio over the seconds).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when a test loads this file by its path
from launch_bytecode import writing_bytecode

TARGET_S = 0.5
TARGET_RATIO = 1.5
COLS, ROWS = 120, 36

BARE_APP = """
import json, sys, time
from pathlib import Path
from textual.app import App
from textual.widgets import Footer, Static

class Bare(App):
    def compose(self):
        yield Static("a bare Textual app")
        yield Footer()

    def on_mount(self):
        self.call_after_refresh(self.painted)

    def painted(self):
        Path(sys.argv[1]).write_text(json.dumps({"t": time.time(), "litellm": "litellm" in sys.modules}))
        self.exit()

Bare().run()
"""

DIDACTYL_CONFIG = """
[llm]
model = ""
[relays]
embedded_port = 0
"""


def _drain(fd: int) -> None:
    """Read the child's terminal output so it never blocks on a full pty buffer."""
    while True:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def run_once(argv: list[str], env: dict[str, str], paint_file: Path, timeout: float = 60.0) -> dict:
    """Launch ``argv`` on a pty; return the first-paint record with ``elapsed`` (seconds from launch)."""
    paint_file.unlink(missing_ok=True)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    reader = threading.Thread(target=_drain, args=(master,), daemon=True)
    reader.start()
    started = time.time()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            start_new_session=True)
    os.close(slave)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{argv[-1]!r} did not paint within {timeout:g}s") from None
    finally:
        os.close(master)
        reader.join(timeout=1)
    if not paint_file.exists():
        raise RuntimeError(f"{' '.join(argv)} exited ({proc.returncode}) without painting")
    record = json.loads(paint_file.read_text())
    record["elapsed"] = record["t"] - started
    return record


def environment(home: Path, paint_file: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIDACTYL_", "TEXTUAL"))}
    config = home / "config.toml"
    config.write_text(DIDACTYL_CONFIG)
    env.update({
        "TERM": "xterm-256color", "COLUMNS": str(COLS), "LINES": str(ROWS),
        "DIDACTYL_CONFIG": str(config), "DIDACTYL_DATA_DIR": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"), "DIDACTYL_FIRST_PAINT_FILE": str(paint_file),
    })
    return writing_bytecode(env)


def measure(runs: int) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {"bare": [], "didactyl": []}
    with tempfile.TemporaryDirectory(prefix="didactyl-bench-") as tmp:
        home = Path(tmp)
        paint_file = home / "painted.json"
        env = environment(home, paint_file)
        commands = {
            "bare": [sys.executable, "-c", BARE_APP, str(paint_file)],
            "didactyl": [sys.executable, "-m", "didactyl_tui"],
        }
        # One untimed round first: the OS file cache and .pyc files are warm for both.
        for argv in commands.values():
            run_once(argv, env, paint_file)
        for _ in range(runs):
            for name, argv in commands.items():
                results[name].append(run_once(argv, env, paint_file))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    results = measure(args.runs)
    bare = statistics.median(r["elapsed"] for r in results["bare"])
    ours = statistics.median(r["elapsed"] for r in results["didactyl"])
    ratio = ours / bare
    litellm_early = any(r.get("litellm") for r in results["didactyl"])
    service_early = any(r.get("service") for r in results["didactyl"])
    print(f"first paint, median of {args.runs} runs ({COLS}x{ROWS} pty):")

    def runs_of(name: str) -> str:
        return ", ".join(f"{r['elapsed']:.3f}" for r in results[name])

    print(f"  bare Textual app  {bare:6.3f} s   runs: {runs_of('bare')}")
    print(f"  didactyl          {ours:6.3f} s   runs: {runs_of('didactyl')}")
    print(f"  ratio             {ratio:6.2f}x  (target <= {TARGET_RATIO}x; absolute target <= {TARGET_S} s)")
    print(f"  litellm imported before the first frame: {litellm_early}; service imported: {service_early}")
    ok = ratio <= TARGET_RATIO and ours <= TARGET_S and not litellm_early
    print("  result:", "OK" if ok else "MISSED")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
