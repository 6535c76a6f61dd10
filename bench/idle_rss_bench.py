"""Idle memory of ``didactyl``: the app alone with no model, and the whole process tree with a model configured
(issues #13, #21, #34), next to a bare Textual app in the same run.

Each app runs as a subprocess on a pseudo-terminal (so Textual really renders and the service really starts:
key, embedded relay, pool, memories). ``--after`` seconds after launch (default 20) — and, with litellm in the app
(``worker_process = false``), once its import is done and its memory has stopped growing — the resident set size
(VmRSS) of each process is read from /proc, and the app is stopped. Runs alternate between the apps; medians are
reported. With a model the tree is the app and its relay at rest, each reported; no key is typed, so the model
helper (``python -m didactyl_tui.agent.llm.worker``, litellm and its HTTP stack) has not started: it starts when a
model is first needed (#34). Should one be there, it is reported and the target is missed.

  app            the TUI itself (``python -m didactyl_tui``); it never imports litellm with the helper (the default)
  relay          the embedded relay (``python -m didactyl_tui.nostr.embedded_relay.daemon``), a process of its own
                 (the bench config sets ``[relays] embedded_idle_exit_s`` to RELAY_IDLE_EXIT_S = 2: it exits 2 s
                 after its app, before the next run, and no process is left behind)

The config is the user's defaults (the ``recall`` memory backend, the profile published at start) but for a
free port and that idle exit.

Also reported per process: PSS (each shared page split among the processes sharing it, on the whole machine), and
whether litellm, tiktoken, pydantic_core or aiohttp are mapped (``/proc/PID/maps``); and for the tree, besides the
sum of the RSS (a page shared by two of its processes counted twice), its distinct resident pages (read from
``/proc/PID/pagemap``: as root only). The tree target is checked on the RSS sum. Targets: no model, the app
<= 130 MiB (#13); with a model, the tree at rest (app + relay, no helper yet) <= 120 MiB and the app <= 100 MiB
without litellm (#34). ``worker_process = false`` ("model in-process": litellm in the app, no helper) is measured too,
for comparison (no target).

    python bench/idle_rss_bench.py [--runs 3] [--after 20] [--check]

``--check`` exits 1 when a target is missed.
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

from launch_bytecode import writing_bytecode

NO_MODEL_TARGET_MIB = 130.0
TREE_TARGET_MIB = 120.0
APP_TARGET_MIB = 100.0
HELPER_SETTLE_S = 60.0  # the longest wait for the model helper's import to finish
COLS, ROWS = 120, 36
NATIVE = ("litellm", "tiktoken", "pydantic_core", "aiohttp")
PAGE = os.sysconf("SC_PAGE_SIZE")
PFN_MASK = (1 << 55) - 1

BARE_APP = """
from textual.app import App
from textual.widgets import Footer, Static

class Bare(App):
    def compose(self):
        yield Static("a bare Textual app")
        yield Footer()

Bare().run()
"""

RELAY_IDLE_EXIT_S = 2  # the relay process exits this long after its app has gone ([relays] embedded_idle_exit_s)

BASE_CONFIG = f"""
[relays]
embedded_port = 0
embedded_idle_exit_s = {RELAY_IDLE_EXIT_S}
"""
NO_MODEL = '[llm]\nmodel = ""\n'
# A model on a server nobody answers at: nothing is sent at idle (the model is only called for a turn).
WITH_MODEL = '[llm]\nmodel = "openai/idle-model"\napi_base = "http://127.0.0.1:9/v1"\nworker_process = {worker}\n'


def _drain(fd: int) -> None:
    """Read the child's terminal output so it never blocks on a full pty buffer."""
    while True:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def status_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for {pid}")


def pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pages(pid: int) -> set[int]:
    """The physical pages (frame numbers) resident in ``pid`` (/proc/PID/pagemap; empty unless run as root)."""
    found: set[int] = set()
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            low, high = (int(x, 16) for x in line.split()[0].split("-"))
            if line.endswith("[vsyscall]"):
                continue
            pagemap.seek(low // PAGE * 8)
            data = pagemap.read((high - low) // PAGE * 8)
            for (entry,) in struct.iter_unpack("Q", data):
                if entry >> 63 and entry & PFN_MASK:  # present, and the frame number is readable
                    found.add(entry & PFN_MASK)
    return found


def mapped(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return [name for name in NATIVE if f"/{name}" in maps]


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def helper_of(pid: int) -> int | None:
    for child in children(pid):
        if "didactyl_tui.agent.llm.worker" in cmdline(child):
            return child
    return None


def relay_of(data_dir: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            args = cmdline(int(entry.name))
            if "didactyl_tui.nostr.embedded_relay.daemon" in args and str(data_dir) in args:
                return int(entry.name)
    return None


def settled(pid: int, grace: float = 2.0) -> None:
    """Wait until ``pid`` maps litellm and its RSS has not grown for ``grace`` seconds (bounded)."""
    deadline = time.monotonic() + HELPER_SETTLE_S
    last, since = -1.0, time.monotonic()
    while time.monotonic() < deadline:
        rss = status_mib(pid)
        if rss > last + 0.5:
            last, since = rss, time.monotonic()
        elif "litellm" in mapped(pid) and time.monotonic() - since >= grace:
            return
        time.sleep(0.25)
    raise RuntimeError(f"the model helper {pid} did not settle within {HELPER_SETTLE_S:g} s")


def part(pid: int) -> dict[str, object]:
    return {"rss": status_mib(pid), "pss": pss_mib(pid), "maps": mapped(pid), "pages": pages(pid)}


def run_once(argv: list[str], env: dict[str, str], after: float, data_dir: Path | None,
             model: bool, in_process: bool) -> dict[str, dict[str, object]]:
    """Launch ``argv`` on a pty, wait, read each process's memory, stop it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    reader = threading.Thread(target=_drain, args=(master,), daemon=True)
    reader.start()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            start_new_session=True)
    os.close(slave)
    try:
        time.sleep(after)
        helper = helper_of(proc.pid) if model else None  # none at rest: it starts when a model is needed (#34)
        if in_process:  # litellm imported in the app itself ([llm] worker_process = false)
            settled(proc.pid)
            time.sleep(1.0)
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(argv[:3])} exited ({proc.returncode}) early")
        parts = {"app": part(proc.pid)}
        if helper is not None:
            parts["model helper"] = part(helper)
        relay = relay_of(data_dir) if data_dir is not None else None
        if relay is not None:
            parts["relay"] = part(relay)
        union: set[int] = set()
        for measured in parts.values():
            union |= measured.pop("pages")  # type: ignore[arg-type]
        parts["tree"] = {"distinct": len(union) * PAGE / 2**20}
        return parts
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


def environment(home: Path, llm: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIDACTYL_", "TEXTUAL"))}
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.toml"
    config.write_text(llm + BASE_CONFIG)
    env.update({
        "TERM": "xterm-256color", "COLUMNS": str(COLS), "LINES": str(ROWS),
        "DIDACTYL_CONFIG": str(config), "DIDACTYL_DATA_DIR": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"), "OPENAI_API_KEY": "sk-idle-bench",
    })
    return writing_bytecode(env)


KINDS = {
    "bare": None,
    "no model": NO_MODEL,
    "model": WITH_MODEL.format(worker="true"),
    "model in-process": WITH_MODEL.format(worker="false"),  # [llm] worker_process = false: no helper
}


def measure(runs: int, after: float, kinds: list[str]) -> dict[str, list[dict[str, dict[str, object]]]]:
    results: dict[str, list[dict[str, dict[str, object]]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="didactyl-rss-") as tmp:
        homes = {kind: Path(tmp) / f"home{n}" for n, kind in enumerate(kinds)}
        envs = {kind: environment(homes[kind], KINDS[kind] or NO_MODEL) for kind in kinds}
        for kind in kinds:
            if KINDS[kind] is not None:
                subprocess.run([sys.executable, "-m", "didactyl_tui", "keygen"], env=envs[kind],
                               capture_output=True, check=True, timeout=60)
        for _ in range(runs):
            for kind in kinds:
                argv = [sys.executable, "-c", BARE_APP] if KINDS[kind] is None else [
                    sys.executable, "-m", "didactyl_tui"]
                data_dir = homes[kind] / "data" if KINDS[kind] is not None else None
                results[kind].append(run_once(argv, envs[kind], after, data_dir, model=kind.startswith("model"),
                                              in_process=kind == "model in-process"))
                time.sleep(RELAY_IDLE_EXIT_S + 0.5)  # the relay's idle exit: the next run starts its own
    return results


def median(samples: list[dict[str, dict[str, object]]], name: str, key: str) -> float:
    values = [float(s[name][key]) for s in samples if name in s]  # type: ignore[arg-type]
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--after", type=float, default=20.0, help="seconds after launch to read the RSS")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which of: " + ", ".join(KINDS))
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]

    results = measure(args.runs, args.after, kinds)
    ok = True
    print(f"Idle memory, median of {args.runs} runs ({args.after:g} s after start; litellm in the app: once its "
          f"import has settled); load {' '.join(f'{x:.2f}' for x in os.getloadavg())}. MiB:")
    print(f"  {'':38} {'RSS':>7} {'PSS':>7}  mapped")
    for kind in kinds:
        samples = results[kind]
        names = [n for n in ("app", "model helper", "relay") if any(n in s for s in samples)]
        total = 0.0
        for name in names:
            rss, pss = median(samples, name, "rss"), median(samples, name, "pss")
            total += rss
            maps = sorted({m for s in samples if name in s for m in s[name]["maps"]})  # type: ignore[union-attr]
            label = "bare Textual app" if kind == "bare" else f"{kind}: {name}"
            print(f"  {label:38} {rss:7.1f} {pss:7.1f}  {', '.join(maps) or '-'}")
        if kind == "no model":
            app = median(samples, "app", "rss")
            met = app <= NO_MODEL_TARGET_MIB and not any("litellm" in s["app"]["maps"] for s in samples)
            ok &= met
            print(f"  {'  target: app <= 130 MiB, no litellm':38} {'met' if met else 'MISSED'}")
        elif kind == "model":
            app = median(samples, "app", "rss")
            app_litellm = any("litellm" in s["app"]["maps"] for s in samples)
            helpers = sum(1 for s in samples if "model helper" in s)
            met_tree = total <= TREE_TARGET_MIB and not helpers
            met_app = app <= APP_TARGET_MIB and not app_litellm
            ok &= met_tree and met_app
            print(f"  {'  whole tree (RSS summed)':38} {total:7.1f}")
            print(f"  {'  whole tree (its pages, each once)':38} {median(samples, 'tree', 'distinct'):7.1f}")
            print(f"  {'  model helpers at rest':38} {helpers:7d}")
            print(f"  {'  target: tree <= 120 MiB, no helper':38} {'met' if met_tree else 'MISSED'}")
            print(f"  {'  target: app <= 100 MiB, no litellm':38} {'met' if met_app else 'MISSED'}")
        elif len(names) > 1:
            print(f"  {'  whole tree (RSS summed)':38} {total:7.1f}")
            print(f"  {'  whole tree (its pages, each once)':38} {median(samples, 'tree', 'distinct'):7.1f}")
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
