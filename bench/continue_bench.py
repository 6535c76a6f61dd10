"""``didactyl --continue`` through the whole app, as a person sees it: seconds from launch until the stored chat's
last message is on the terminal, against opening a new chat, in one run (#34).

    python bench/continue_bench.py [--sizes 1000,100000] [--runs 5]

Each run launches ``python -m didactyl_tui`` in a tmux session of its own (160x48) and reads the screen from
outside (``tmux capture-pane``, every 10 ms) until what it waits for is there: for a new chat, the empty
conversation's hint; for ``--continue``, the chat's last reply (a short line of its own). Nothing in the app is
instrumented. The data dir holds one stored chat per size (users, markdown replies, a tool call every tenth turn),
a model is configured (no request is made), and the embedded relay is stopped after each run, so every launch
starts the service from cold as a person's first launch of the day does. Rounds interleave: new chat, then each
size, round after round, so the machine's load falls on all alike. Medians.

Lines:
  new chat            launch -> the empty conversation on screen
  continue N          launch -> the last of N stored messages on screen; ratio to the new chat
                      (target for 100,000: <= 1.3x)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

TARGET_RATIO = 1.3
COLS, ROWS = 160, 48
POLL_S = 0.01
LAUNCHES = itertools.count()
TIMEOUT_S = 60.0
NEW_CHAT_MARK = "Say something. Enter sends"
CONFIG = """\
[llm]
model = "openai/stub-model"
api_base = "http://127.0.0.1:9/v1"
api_key_env = "DIDACTYL_BENCH_LLM_KEY"
[relays]
embedded_port = 0
embedded_idle_exit_s = 2.0
[memory]
backend = "none"
[agent]
publish_profile = false
"""


def last_mark(size: int) -> str:
    return f"Last words of chat {size}."


def fill(data_dir: Path, size: int) -> None:
    """A data dir holding one chat of ``size`` messages, the last a short reply of its own."""
    from resume_bench import stored_chat

    from didactyl_tui.service.sessions import open_sessions

    sessions = open_sessions(data_dir)
    store = sessions.store
    session = store.new_session("bench")
    messages = stored_chat(size - 2)
    for start in range(0, len(messages), 10_000):
        store.append(session, messages[start:start + 10_000])
    store.append(session, [{"role": "user", "content": "And finally?"},
                           {"role": "assistant", "content": last_mark(size)}])
    store.close()


def launch(data_dir: Path, config: Path, args: list[str], mark: str, server: str) -> float:
    """Seconds from launching the app in tmux to ``mark`` on its screen (a tmux server of its own each time: one
    being stopped would refuse the next session)."""
    from launch_bytecode import writing_bytecode
    from shared_relay_support import kill_shared_relays
    from tui_support import TEST_KEY

    env = {"DIDACTYL_DATA_DIR": str(data_dir), "DIDACTYL_CONFIG": str(config), "DIDACTYL_NSEC": TEST_KEY.nsec(),
           "DIDACTYL_BENCH_LLM_KEY": "not-a-real-key", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = " ".join(["env", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m", "didactyl_tui", *args])
    tmux = ["tmux", "-L", f"{server}-{next(LAUNCHES)}"]
    t0 = time.perf_counter()
    subprocess.run([*tmux, "new-session", "-d", "-s", "bench", "-x", str(COLS), "-y", str(ROWS), command],
                   check=True, env=writing_bytecode({**os.environ, "TERM": "xterm-256color"}))
    try:
        while True:
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "bench"], capture_output=True,
                                    text=True).stdout
            elapsed = time.perf_counter() - t0
            if mark in screen:
                return elapsed
            if elapsed > TIMEOUT_S:
                raise SystemExit(f"{mark!r} not on screen after {TIMEOUT_S:g} s:\n{screen}")
            time.sleep(POLL_S)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        kill_shared_relays(data_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed")
    sizes = [int(s) for s in args.sizes.split(",")]
    server = f"didactyl-continue-bench-{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = root / "config.toml"
        config.write_text(CONFIG)
        dirs = {size: root / f"chat-{size}" for size in sizes}
        for size, data_dir in dirs.items():
            fill(data_dir, size)
        new_dir = root / "new"
        new_dir.mkdir(mode=0o700)
        times: dict[str, list[float]] = {"new": [], **{str(s): [] for s in sizes}}
        launch(new_dir, config, [], NEW_CHAT_MARK, server)  # the key and databases made; files in the page cache
        for size, data_dir in dirs.items():
            launch(data_dir, config, ["--continue"], last_mark(size), server)
        for _ in range(args.runs):
            times["new"].append(launch(new_dir, config, [], NEW_CHAT_MARK, server))
            for size, data_dir in dirs.items():
                times[str(size)].append(launch(data_dir, config, ["--continue"], last_mark(size), server))
    load = os.getloadavg()
    new = statistics.median(times["new"])
    print(f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.runs} runs, medians (all: {json.dumps(times)})")
    print(f"{'new chat':<18} {new:6.2f} s")
    ok = True
    for size in sizes:
        secs = statistics.median(times[str(size)])
        ratio = secs / new
        target = size >= 100_000
        ok &= not target or ratio <= TARGET_RATIO
        verdict = (f"target <= {TARGET_RATIO:g}x  {'ok' if ratio <= TARGET_RATIO else 'MISSED'}" if target else "")
        print(f"{f'continue {size:,}':<18} {secs:6.2f} s  {ratio:5.2f}x  {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
