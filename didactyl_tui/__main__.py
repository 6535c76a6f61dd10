"""``didactyl`` and ``python -m didactyl_tui``: argv → config → the TUI or a headless command.

Headless commands never import Textual or litellm; the TUI is imported only when it is launched (and it
imports the service itself, after its first frame).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .cli import run
from .config import Config

if TYPE_CHECKING:
    from .service.sessions import StoredTail


def launch_tui(config: Config, data_dir: Path, env: Mapping[str, str], opened: StoredTail | None = None) -> None:
    from .tui.app import run_app

    run_app(config, data_dir=data_dir, env=env, opened=opened)


def main(argv: Sequence[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv, launch_tui=launch_tui)


if __name__ == "__main__":
    sys.exit(main())
