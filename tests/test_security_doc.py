"""docs/security.md is a threat model whose every line is backed by a named test: each test it names exists (a
renamed or deleted test would leave a promise with nothing behind it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMED = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?")


def test_every_test_the_threat_model_names_exists() -> None:
    text = (ROOT / "docs" / "security.md").read_text("utf-8")
    named = NAMED.findall(text)
    assert len(named) > 50  # the threat model names its tests
    missing = []
    for path, name in named:
        module = ROOT / path
        if not module.is_file():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\(", module.read_text("utf-8"), re.M):
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/security.md names tests that do not exist: {missing}"
