"""One key written into the user's config file, everything else in it kept: its values, and its comments and layout
whenever the file allows it (the app writes the config file only for a choice the person made in it, such as the
first run's ``[signer] bunker``; runtime choices go to state.toml).

The key's line is added to (or replaced in) the text itself, its value written by tomli-w; the new text is read back
and must hold exactly the old values plus the new one. A file where that cannot be done line by line (the table
written inline, the key dotted at the top) is written again whole by tomli-w from its values: then the values are
kept and the comments are not. A new file is created 0600 (as every file we create); an existing one keeps its mode.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .whole_file import write_whole

MAX_CONFIG_BYTES = 1024 * 1024  # a config file is a few KiB: anything larger is not rewritten here

_HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\s*(#.*)?$")  # [table] (and [[array]], not matched)


def set_config_value(path: Path, section: str, key: str, value: Any) -> None:
    """``[section] key = value`` in the config file at ``path`` (created when missing), the rest kept.
    :class:`ConfigError` naming the file when it cannot be read, parsed or written."""
    import tomli_w

    path = Path(path)
    text = _read(path)
    try:
        old = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML, not changed: {exc}", "Config") from None
    if section in old and not isinstance(old[section], dict):
        raise ConfigError(f"{path}: [{section}] is not a table, not changed", "Config")
    wanted = copy.deepcopy(old)
    wanted.setdefault(section, {})[key] = value
    line = tomli_w.dumps({key: value}).strip()
    new = _with_line(text, section, key, line)
    if new is None or _parsed(new) != wanted:
        new = tomli_w.dumps(wanted)  # the values kept, the comments not: said in the module doc
    _write(path, new)


def _read(path: Path) -> str:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path} is over {MAX_CONFIG_BYTES:,} bytes: not changed", "Config")
        return path.read_text("utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}", "Config") from None


def _parsed(text: str) -> dict[str, Any] | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def _with_line(text: str, section: str, key: str, line: str) -> str | None:
    """``text`` with ``line`` as ``key``'s line in ``[section]``: in place of the key's line, else right after the
    table's header, else in a new table at the end. None when the table's header appears more than once."""
    lines = text.splitlines(keepends=True)
    headers = [n for n, raw in enumerate(lines) if (m := _HEADER.match(raw)) and m.group(1) == section]
    if len(headers) > 1:
        return None
    if not headers:
        ending = "" if not text or text.endswith("\n") else "\n"
        spacer = "\n" if text.strip() else ""
        return f"{text}{ending}{spacer}[{section}]\n{line}\n"
    start = headers[0] + 1
    end = next((n for n in range(start, len(lines)) if lines[n].lstrip().startswith("[")), len(lines))
    own = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for n in range(start, end):
        if own.match(lines[n]):
            newline = "\n" if lines[n].endswith("\n") else ""
            return "".join([*lines[:n], line + newline, *lines[n + 1:]])
    if start == len(lines) and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return "".join([*lines[:start], line + "\n", *lines[start:]])


def _write(path: Path, text: str) -> None:
    """Written whole or not at all (never half a config); 0600 when new, else the file's mode."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        mode = 0o600
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}", "Config") from None
    try:
        write_whole(path, text, mode=mode)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}", "Config") from None
