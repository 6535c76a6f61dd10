"""Docs that point somewhere: every file of the repository that README.md, CONTRIBUTING.md, docs/ and the package's
docstrings and comments name exists (as written, or as the end of a path in the repository: ``agent/tools/registry.py``,
``registry.py``), every ``didactyl_tui.…`` module named exists, and every database named is one the code makes. A
moved module, a renamed test or a cited file that is not in the repository fails here, naming where it is cited."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A path of ours: one or more segments ending in a file of a kind the repository keeps (not a URL, not ~/…).
PATH = re.compile(r"(?<![\w/.~:*-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|tcss))(?![\w/(])")
MODULE = re.compile(r"(?<![\w.])(didactyl_tui(?:\.\w+)+)")
DATABASE = re.compile(r"(?<![\w.-])([\w.-]+\.sqlite3)\b")
# Names of a person's own files, given as examples (the agent's file memory, a soul file), not of the repository.
EXAMPLES = {"notes.md", "projects/alpha.md", "missing-soul.md"}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def _texts() -> Iterator[tuple[str, str]]:
    """(where, text) for every document and every docstring and comment of the package."""
    for path in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]:
        yield path.relative_to(ROOT).as_posix(), path.read_text("utf-8")
    for path in sorted((ROOT / "didactyl_tui").rglob("*.py")):
        source = path.read_text("utf-8")
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    yield where, doc
        yield where, "\n".join(line.split("#", 1)[1] for line in source.splitlines() if "#" in line)


def _databases() -> set[str]:
    """The database file names the package itself makes (its string constants)."""
    names = set()
    for path in (ROOT / "didactyl_tui").rglob("*.py"):
        names.update(re.findall(r"[\"']([\w.-]+\.sqlite3)[\"']", path.read_text("utf-8")))
    return names


def _module_exists(name: str) -> bool:
    parts = name.split(".")
    for end in range(len(parts), 1, -1):  # a module, or an attribute of one
        base = ROOT.joinpath(*parts[:end])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def test_every_path_module_and_database_the_docs_name_exists() -> None:
    files = _tracked()
    databases = _databases()
    missing: set[str] = set()
    for where, text in _texts():
        for path in PATH.findall(text):
            if path.startswith("../"):  # a link beside its document
                path = os.path.normpath(Path(where).parent / path)
            if path not in EXAMPLES and not any(f == path or f.endswith("/" + path) for f in files):
                missing.add(f"{where}: {path}")
        missing.update(f"{where}: {name}" for name in MODULE.findall(text) if not _module_exists(name.rstrip(".")))
        missing.update(f"{where}: {name}" for name in DATABASE.findall(text) if name not in databases)
    assert not missing, "named but not there:\n" + "\n".join(sorted(missing))
