"""What ``pip install .`` costs a new user, and which direct dependency brings the weight.

Creates a fresh virtual environment in a temporary folder, installs this checkout into it with no pip cache
(a first install), and reports: the time of the install, the packages installed, the size on disk of
site-packages, and for each direct dependency the packages only it pulls in (not shared with another direct
dependency) with their size on disk. Then times ``didactyl --help`` (the command must stay instant). Needs the
package index; never run by the tests.

    python bench/install_weight.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_sizes(site: Path) -> dict[str, int]:
    """Bytes on disk per installed distribution, from each RECORD."""
    sizes: dict[str, int] = {}
    for info in site.glob("*.dist-info"):
        name = _norm(info.name[: -len(".dist-info")].rsplit("-", 1)[0])
        total = 0
        record = info / "RECORD"
        for line in record.read_text("utf-8").splitlines() if record.exists() else []:
            path = site / line.split(",")[0]
            if path.is_file():
                total += path.stat().st_size
        sizes[name] = total
    return sizes


def _requires(report: dict) -> dict[str, list[str]]:
    installed = {_norm(i["metadata"]["name"]): i for i in report["install"]}
    graph: dict[str, list[str]] = {}
    for name, item in installed.items():
        deps = []
        for req in item["metadata"].get("requires_dist") or []:
            if "extra ==" in req:
                continue
            dep = _norm(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))
            if dep in installed:
                deps.append(dep)
        graph[name] = deps
    return graph


def _closure(graph: dict[str, list[str]], roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph.get(name, [])
    return seen


def measure(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = venv / "bin" / "pip"
    report_path = venv / "install-report.json"
    started = time.monotonic()
    subprocess.run([str(pip), "install", "-q", "--no-cache-dir", "--report", str(report_path), str(ROOT)],
                   check=True)
    install_s = time.monotonic() - started
    report = json.loads(report_path.read_text("utf-8"))
    site = next((venv / "lib").glob("python3*/site-packages"))
    sizes = _dist_sizes(site)
    graph = _requires(report)
    direct = graph.get("didactyl-tui", [])
    mb = 1e6
    print(f"first install: {install_s:.1f} s, {len(report['install'])} packages, "
          f"site-packages {sum(sizes.values()) / mb:.0f} MB")
    rows = []
    for dep in direct:
        only = _closure(graph, [dep]) - _closure(graph, [d for d in direct if d != dep])
        rows.append((sum(sizes.get(n, 0) for n in only) / mb, len(only), dep))
    for only_mb, count, dep in sorted(rows, reverse=True):
        print(f"  {dep:22} brings {count:3} packages only it needs, {only_mb:6.1f} MB")
    times = []
    for _ in range(5):
        started = time.monotonic()
        subprocess.run([str(venv / "bin" / "didactyl"), "--help"], check=True, capture_output=True)
        times.append(time.monotonic() - started)
    print(f"didactyl --help: {sorted(times)[len(times) // 2]:.3f} s (median of 5)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", help="create the venv here and keep it")
    args = parser.parse_args()
    if args.keep:
        measure(Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="didactyl-install-") as tmp:
            measure(Path(tmp) / "venv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
