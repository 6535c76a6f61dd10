"""API keys typed in the app's model dialog: kept in one private file, and read at start into the environment
the model call uses, so a key typed now works now (no restart) and at every later start.

Where: ``[llm] api_key_file``, by default ``<data dir>/api_keys.toml``: written 0600 (a temporary file beside
it, then a rename), its folder 0700. What: one ``VARIABLE = "key"`` line per key, named by the model's key
variable (state.toml names that variable, never the key). The environment wins: a variable the shell already
sets is never replaced from the file (the dialog says so and asks for another name). The key is never shown,
logged, or written anywhere else.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import tomllib
from pathlib import Path

from ..config import Config
from ..errors import ConfigError
from ..whole_file import write_whole

API_KEY_FILE = "api_keys.toml"
MAX_FILE_BYTES = 64 * 1024  # a few keys; anything bigger is not ours
_HEADER = ("# API keys typed in didactyl's model dialog: VARIABLE = \"key\". Private (0600): never share or commit "
           "it.\n# A variable set in the environment wins over the same name here.\n")
_lock = threading.Lock()


def api_key_file(config: Config, data_dir: Path) -> Path:
    """Where keys typed in the app are kept: ``[llm] api_key_file`` (``~`` expands), else the data dir's."""
    named = config.llm.api_key_file.strip()
    return Path(named).expanduser() if named else Path(data_dir) / API_KEY_FILE


def is_variable_name(name: str) -> bool:
    return bool(name) and name.isascii() and name.replace("_", "").isalnum() and not name[0].isdigit()


def read_api_keys(path: Path) -> dict[str, str]:
    """The kept keys by variable name ({} when there is no file). ConfigError (one line, no key in it) when
    the file cannot be read or is not ours; a file others may read is made private again first."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror}); keys typed in the app are not used",
                          "API keys") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: not a key file (a regular file under {MAX_FILE_BYTES // 1024} KiB); keys "
                          "typed in the app are not used", "API keys")
    if stat.S_IMODE(st.st_mode) & 0o077:
        with contextlib.suppress(OSError):  # another user's file stays as it is
            os.chmod(path, 0o600)
    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        # tomllib's messages give a line and column, never the text: no key reaches the screen through them.
        reason = exc.strerror if isinstance(exc, OSError) else str(exc) if isinstance(
            exc, tomllib.TOMLDecodeError) else "not UTF-8"
        raise ConfigError(f"{path}: cannot read it ({reason}); keys typed in the app are not used",
                          "API keys") from None
    return {name: value for name, value in data.items() if is_variable_name(name) and isinstance(value, str)}


def load_api_keys(path: Path, env: dict[str, str]) -> None:
    """Add the kept keys to ``env`` (the variables it does not set already: the environment wins)."""
    for name, key in read_api_keys(path).items():
        if key.strip():
            env.setdefault(name, key.strip())


def keep_api_key(path: Path, name: str, key: str) -> None:
    """Keep ``key`` under ``name`` (the other keys stay). A file write: call it off the UI loop."""
    import tomli_w

    if not is_variable_name(name):
        raise ConfigError("the key variable must be an environment variable's name (letters, digits, _)",
                          "API keys")
    with _lock:
        keys = read_api_keys(path)
        keys[name] = key.strip()
        _write_private(path, _HEADER + tomli_w.dumps(dict(sorted(keys.items()))))


def _write_private(path: Path, text: str) -> None:
    from ..agent.private_files import ensure_data_dir

    ensure_data_dir(path.parent)  # 0700 when it creates it
    try:
        write_whole(path, text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", "API keys") from None
