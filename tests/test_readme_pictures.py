"""The README's pictures can be regenerated: scripts/make_screenshots.py drives the real app to the main screen and
the prompt inspector and writes both SVGs, with no secret in them."""

from __future__ import annotations

import html
import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("make_screenshots", ROOT / "scripts" / "make_screenshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_make_screenshots_writes_both_pictures_without_the_key(tmp_path: Path, warm_litellm: None, utc) -> None:
    script = _script()
    written = await script.make(tmp_path)
    assert sorted(p.name for p in written) == ["main-screen.svg", "prompt-inspector.svg"]
    key = script.derived_key(os.environ.get(script.SEED_ENV) or script.DEFAULT_SEED)
    texts = {p.name: html.unescape(p.read_text("utf-8")).replace("\xa0", " ") for p in written}
    for name, svg in texts.items():
        assert key.nsec() not in svg and key.secret_hex() not in svg, name
        assert "nsec1" not in svg, name
    assert "drinks green tea" in texts["main-screen.svg"]  # the memory the scripted turn saved
    assert "memory_save" in texts["main-screen.svg"]
    # The saved memory is in the next prompt (a section with tokens, not skipped as empty).
    assert re.search(r"short_term_memory \[system\] · memory_short_term_read · \d+ tok", texts["prompt-inspector.svg"])


def test_check_picture_refuses_a_picture_with_the_secret(tmp_path: Path) -> None:
    script = _script()
    key = script.derived_key("another seed")
    for leaked in (key.nsec(), key.secret_hex(), str(tmp_path)):
        with pytest.raises(SystemExit):
            script.check_picture(f"<svg>{leaked}</svg>", key, tmp_path, "x.svg")
    script.check_picture("<svg>fine</svg>", key, tmp_path, "x.svg")
