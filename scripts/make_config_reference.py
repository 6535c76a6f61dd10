"""Write docs/configuration.md from didactyl_tui/config.py (tests/test_quality.py checks it is current).

    python scripts/make_config_reference.py          # rewrite the file
    python scripts/make_config_reference.py --check  # exit 1 if it is out of date

A script rather than ``python -m didactyl_tui.config_file``: the [keys] table comes from the TUI's action table, and
the config sits below the TUI in the import layers.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from didactyl_tui.actions import KEY_ACTIONS  # noqa: E402
from didactyl_tui.config_reference import render_reference  # noqa: E402

TARGET = ROOT / "docs" / "configuration.md"


def main(argv: list[str]) -> int:
    text = render_reference(KEY_ACTIONS)
    if argv == ["--check"]:
        current = TARGET.read_text("utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run python scripts/make_config_reference.py")
            return 1
        return 0
    TARGET.write_text(text, "utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
