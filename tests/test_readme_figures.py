"""The README's figures that can be checked stay true: how many direct dependencies didactyl has (exactly, from
pyproject.toml and from the installed distribution's metadata), and how many packages a first install brings (the
closure of those dependencies, walked through the installed metadata as pip resolves it: markers for this Python,
extras followed). The README's two set-up commands are there, each as one copyable block.

The total is resolved from the package index at install time, so a clean clone installed later may see a
dependency's release add or drop a package or two: the check allows that drift (a tenth), and fails when the
figure is stale by more. Times and sizes are measured by ``bench/install_weight.py``, never asserted here."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
FIGURES = re.compile(r"(\d+) packages besides didactyl itself, from its (\d+)\s+direct dependencies")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wanted(requires: list[str] | None, extras: set[str]) -> list[Requirement]:
    """The requirements that apply here: no marker, or one true for this interpreter with one of ``extras``."""
    out = []
    for line in requires or ():
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            out.append(req)
    return out


def install_closure(project: str) -> tuple[list[str], set[str]]:
    """``project``'s direct dependencies (no extras of its own), and every package they bring, by installed
    metadata."""
    direct = _wanted(distribution(project).requires, set())
    extras_of: dict[str, set[str]] = {}
    todo = [(req.name, set(req.extras)) for req in direct]
    while todo:
        name, extras = todo.pop()
        key = _norm(name)
        if key in extras_of and extras <= extras_of[key]:
            continue
        extras_of.setdefault(key, set()).update(extras)
        todo += [(req.name, set(req.extras)) for req in _wanted(distribution(key).requires, extras_of[key])]
    return [_norm(req.name) for req in direct], set(extras_of)


def readme_figures() -> tuple[int, int]:
    text = " ".join((ROOT / "README.md").read_text("utf-8").split())
    found = FIGURES.search(text)
    assert found, "README.md no longer says how many packages an install brings"
    return int(found.group(1)), int(found.group(2))


def test_the_direct_dependency_count_is_what_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["dependencies"]
    assert readme_figures()[1] == len(declared), "README.md: the direct dependency count"


def test_the_package_count_is_what_an_install_brings() -> None:
    try:
        direct, closure = install_closure("didactyl-tui")
    except PackageNotFoundError as exc:
        pytest.skip(f"didactyl-tui is not installed here ({exc}): pip install -e '.[test]'")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["dependencies"]
    assert sorted(direct) == sorted(_norm(Requirement(d).name) for d in declared), (
        "the installed metadata is older than pyproject.toml: reinstall (pip install -e '.[test]')")
    stated, _ = readme_figures()
    assert abs(len(closure) - stated) <= stated // 10, (
        f"README.md says {stated} packages; an install here brings {len(closure)}: re-measure with "
        "python bench/install_weight.py and update the figures")


def test_the_two_set_up_commands_are_there_as_one_block_each() -> None:
    text = (ROOT / "README.md").read_text("utf-8")
    for marker, command in (
            ("<!-- run-command -->", "python3 -m venv .venv && . .venv/bin/activate && pip install . && didactyl"),
            ("<!-- test-command -->", "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && "
                                      "pytest")):
        assert text.count(marker) == 1, marker
        block = text.split(marker, 1)[1].lstrip("\n")
        assert block.startswith(f"```sh\n{command}\n```\n"), (marker, block[:200])
