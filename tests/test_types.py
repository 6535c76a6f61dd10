"""The package type-checks: mypy, with the settings of ``[tool.mypy]`` in pyproject.toml (strict; CONTRIBUTING.md,
"Types"), finds no error in ``didactyl_tui``.

mypy runs in a subprocess with this interpreter (so it sees the installed Textual, websockets, litellm...), with its
cache in the repository's ``.mypy_cache`` (ignored by git): a cold run takes ~24 s (17 s of CPU), a run after a small
change a few seconds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ERROR = re.compile(r"^\S+\.py:\d+: error: ", re.MULTILINE)


def run_mypy(*args: str, cache: Path = ROOT / ".mypy_cache") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(cache), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_package_has_no_type_errors() -> None:
    proc = run_mypy("-p", "didactyl_tui")
    errors = [line for line in proc.stdout.splitlines() if ERROR.match(line)]
    assert not errors and proc.returncode == 0, (
        f"mypy found {len(errors)} type error(s) in didactyl_tui:\n" + "\n".join(errors or [proc.stdout, proc.stderr]))


def test_the_checker_reports_an_error(tmp_path: Path) -> None:
    """The check above can fail: the same settings refuse a module with a type error, and say where."""
    bad = tmp_path / "bad_types.py"
    bad.write_text("def count() -> int:\n    return 'three'\n", "utf-8")
    proc = run_mypy(str(bad), cache=tmp_path / "cache")  # its own cache: the test above may be running meanwhile
    assert proc.returncode == 1
    assert ERROR.search(proc.stdout) and "bad_types.py:2: error: Incompatible return value type" in proc.stdout
