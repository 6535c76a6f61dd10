"""<data dir>/state.toml: runtime choices the app owns (model, theme), never the user's config.toml.

The one reader and writer. Light (stdlib only at import): the TUI reads the theme before its first frame.
"""

from __future__ import annotations

import threading
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError

STATE_FILE = "state.toml"
_lock = threading.Lock()


def read_state(data_dir: Path) -> dict[str, Any]:
    """state.toml as a dict; missing or unreadable is just empty (it only holds preferences)."""
    try:
        with open(Path(data_dir) / STATE_FILE, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def write_state(data_dir: Path, values: Mapping[str, Any]) -> None:
    import tomli_w

    from ..agent.private_files import ensure_data_dir
    from ..whole_file import write_whole  # tempfile: not for the first frame, which reads this file

    path = Path(data_dir) / STATE_FILE
    ensure_data_dir(path.parent)
    try:  # private, as every file we create (it records which identity events are ours)
        write_whole(path, tomli_w.dumps(dict(values)))
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}", "Settings") from None


def remember(data_dir: Path, key: str, value: Any) -> None:
    """Keep one runtime choice (read, change, write under one lock: two choices at once both stay)."""
    with _lock:
        state = read_state(data_dir)
        state[key] = value
        write_state(data_dir, state)


def remember_many(data_dir: Path, values: Mapping[str, Any]) -> None:
    """Keep several runtime choices in one write (e.g. a model with its server and key variable)."""
    with _lock:
        state = read_state(data_dir)
        state.update(values)
        write_state(data_dir, state)
