"""A message typed right after the app starts and sent 3 s later: seconds from Enter to its first token on screen,
for this checkout (the model helper starts when a model is first needed: the first key) against a reference
checkout (by default the code before #34, whose helper started with the service), in one run (#34).

    python bench/first_reply_bench.py [--rounds 3] [--reference REV] [--wait 3]

Each run is a process of its own: the real app, headless (130x40), its real service and embedded relay, a model
helper that imports litellm for real (a cold start, as a person's), and the scripted OpenAI-compatible model
(tests/llm_stub.py) answering at once. Two keys are typed as soon as the first frame is up, Enter ``--wait``
seconds after them. The reference is ``git archive REV`` unpacked in a temporary folder (no worktree is touched)
and run the same way. Rounds interleave: this checkout, then the reference, round after round. Medians.

Lines:
  first token       Enter -> the reply's first words painted (target: this checkout at most 1 s slower than the
                    reference)
  helper at         when the model helper process appeared, from launch (this checkout: at the first key; the
                    reference: once its service had started)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from launch_bytecode import writing_bytecode

ROOT = Path(__file__).resolve().parent.parent
TARGET_EXTRA_S = 1.0
SIZE = (130, 40)
REPLY = "Hello there: this is the first reply, and it starts at once."


def helper_pid(app_pid: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            args = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if int(stat[1]) == app_pid and "didactyl_tui.agent.llm.worker" in args:
            return int(entry.name)
    return None


async def child(base_url: str, wait_s: float) -> dict[str, Any]:
    """(In the checkout under test: its package and tests first on sys.path.) One launch, one message."""
    from tui_support import make_app, make_config

    t0 = time.perf_counter()
    helper_at: list[float] = []

    async def watch_helper() -> None:
        while not helper_at:
            if helper_pid(os.getpid()) is not None:
                helper_at.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)

    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(llm_base_url=base_url)
        config.llm.timeout_s = 120.0
        config.relays.embedded_idle_exit_s = 2.0
        app = make_app(Path(tmp), config)
        watcher = asyncio.create_task(watch_helper())
        async with app.run_test(size=SIZE) as pilot:
            main = app.main_screen
            while not (main.is_mounted and main.chat_input.has_focus):  # the first frame's message box
                await asyncio.sleep(0.005)
            typed = time.perf_counter()
            await pilot.press("h", "i")
            await asyncio.sleep(max(0.0, typed + wait_s - time.perf_counter()))
            sent = time.perf_counter()
            await pilot.press("enter")
            from didactyl_tui.tui.widgets.message_entry import MessageEntry

            def first_words() -> bool:
                replies = [e for e in main.conversation.query(MessageEntry) if e.role == "assistant"]
                return bool(replies and replies[-1].painted_text)

            deadline = sent + 180
            while not first_words():
                if time.perf_counter() > deadline:
                    raise SystemExit("no reply within 180 s")
                await asyncio.sleep(0.005)
            first_token = time.perf_counter() - sent
            watcher.cancel()
        return {"first_token": first_token, "typed_at": typed - t0,
                "helper_at": helper_at[0] if helper_at else None}


def reference_tree(rev: str, into: Path) -> Path:
    """``git archive REV`` unpacked under ``into`` (read from the repository; no worktree touched)."""
    archive = into / "reference.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), rev], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "reference", filter="data")
    return into / "reference"


def launch(root: Path, base_url: str, wait_s: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIDACTYL_", "TEXTUAL"))}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "tests")])
    env = writing_bytecode(env)
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", "--root", str(root),
                          "--base-url", base_url, "--wait", str(wait_s)],
                         env=env, capture_output=True, text=True, timeout=400)
    if out.returncode != 0:
        raise SystemExit(f"a run in {root} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


async def parent(rounds: int, rev: str, wait_s: float) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from llm_stub import LlmStub, Reply

    with tempfile.TemporaryDirectory() as tmp:
        reference = reference_tree(rev, Path(tmp))
        async with LlmStub() as stub:
            stub.respond(lambda request: Reply.text_reply(REPLY))
            runs: dict[str, list[dict[str, Any]]] = {"this checkout": [], f"reference {rev[:12]}": []}
            for _ in range(rounds):
                for name, root in zip(runs, (ROOT, reference), strict=True):
                    runs[name].append(await asyncio.to_thread(launch, root, stub.base_url, wait_s))
    load = os.getloadavg()
    print(f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {rounds} rounds; typed at the first frame, sent "
          f"{wait_s:g} s later; medians (all: {json.dumps(runs)})")
    medians = {}
    for name, samples in runs.items():
        first = statistics.median(s["first_token"] for s in samples)
        helpers = [s["helper_at"] for s in samples if s["helper_at"] is not None]
        medians[name] = first
        helper = f"{statistics.median(helpers):5.2f} s" if helpers else "  -"
        print(f"{name:<24} first token {first:6.2f} s after Enter   helper at {helper}")
    mine, theirs = medians.values()
    extra = mine - theirs
    print(f"{'difference':<24} {extra:+6.2f} s   target <= +{TARGET_EXTRA_S:g} s  "
          f"{'ok' if extra <= TARGET_EXTRA_S else 'MISSED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reference", default="", help="the revision to compare with (default: merge-base with "
                                                        "main)")
    parser.add_argument("--wait", type=float, default=3.0, help="seconds from typing to Enter")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", default="", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(child(args.base_url, args.wait))))
        return 0
    rev = args.reference or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
                                           capture_output=True, text=True, check=True).stdout.strip()
    asyncio.run(parent(args.rounds, rev, args.wait))
    return 0


if __name__ == "__main__":
    sys.exit(main())
