"""A document's name becomes its ``DocumentKey`` at the edges only (the tools, the CLI, the views); everything inside
takes the typed key. A ``DocumentKey.parse`` call anywhere else, or a signature taking ``DocumentKey | str``, fails
here, naming the module."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "didactyl_tui"
EDGES = ("agent/tools/", "cli/", "tui/")  # where a person's or a model's name for a document arrives
PARSE = re.compile(r"DocumentKey\.parse\(")
LOOSE = re.compile(r"DocumentKey \| str")


def _modules() -> list[tuple[str, str]]:
    return [(p.relative_to(PACKAGE).as_posix(), p.read_text("utf-8")) for p in sorted(PACKAGE.rglob("*.py"))]


def test_document_names_are_parsed_only_at_the_edges() -> None:
    inside = [path for path, source in _modules() if PARSE.search(source) and not path.startswith(EDGES)
              and path != "agent/documents/keys.py"]
    assert inside == [], f"DocumentKey.parse inside (take a DocumentKey instead): {inside}"


def test_no_signature_takes_a_key_or_a_name() -> None:
    loose = [path for path, source in _modules() if LOOSE.search(source)]
    assert loose == [], f"DocumentKey | str in: {loose}"
