"""Files the app keeps in its data dir are private (0600), whatever the directory's mode or the umask.

A data dir that already exists with mode 0755, or a umask of 022, must not leave a database readable by
other local users: the conversations, the recall index and the memory history hold plaintext.

SQLite creates a database with 0644 & ~umask, and its ``-wal``/``-shm`` files with the database file's mode.
So :func:`connect_private` creates the database file 0600 *before* SQLite opens it (``os.open`` with an
explicit mode, unaffected by other threads: no process-wide ``os.umask`` dance), and tightens the
``-wal``/``-shm`` files after opening, in case an older run left them wider. :func:`permission_warnings`
says, as ssh does, when the data dir or the key is open to group or others; the service shows the lines.

Disk full: :func:`storage_error_message` turns SQLite's "database or disk is full" and ENOSPC into one
clear line, so a save that cannot be persisted says "disk full" rather than a confusing follow-on error.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

from ..errors import ConfigError

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def is_memory_path(path: str | os.PathLike[str]) -> bool:
    text = str(path)
    return text == ":memory:" or text.startswith("file::memory:")


def make_private_file(path: str | os.PathLike[str]) -> None:
    """Create ``path`` empty with mode 0600 if absent; make an existing file 0600 (never follows a symlink).

    An existing file is only chmod-ed, never opened: closing any descriptor of a database file drops every
    POSIX lock this process holds on it, including the locks of a SQLite connection already using it.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, "refusing to open a database through a symlink", str(p)) from None
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != PRIVATE_FILE_MODE:
            os.chmod(p, PRIVATE_FILE_MODE)
        return
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != PRIVATE_FILE_MODE:  # an odd filesystem widened it
            os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)


def tighten_sqlite_files(db_path: str | os.PathLike[str]) -> None:
    """chmod 0600 the database and the side files SQLite made beside it (those that exist)."""
    base = str(db_path)
    for suffix in ("", *SQLITE_SIDE_FILES):
        try:
            st = os.lstat(base + suffix)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != PRIVATE_FILE_MODE:
            os.chmod(base + suffix, PRIVATE_FILE_MODE)


def connect_private(db_path: str | os.PathLike[str], **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect`` for a file in the data dir, created 0600 with its parent 0700 (when we create it).

    Raises ``sqlite3.Error`` or ``OSError`` like ``sqlite3.connect`` and ``mkdir`` would. Call
    :func:`tighten_sqlite_files` again after setting ``journal_mode=WAL`` (which creates the side files).
    """
    if is_memory_path(db_path):
        return sqlite3.connect(str(db_path), **kwargs)
    path = Path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    make_private_file(path)
    tighten_sqlite_files(path)
    return sqlite3.connect(str(path), **kwargs)


def open_private_wal(db_path: str | os.PathLike[str], **kwargs: Any) -> sqlite3.Connection:
    """:func:`connect_private`, then WAL journal mode, then the side files tightened."""
    db = connect_private(db_path, **kwargs)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        if not is_memory_path(db_path):
            tighten_sqlite_files(db_path)
    except BaseException:
        db.close()
        raise
    return db


# --- warnings, as ssh gives them -------------------------------------------------------------------


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None


def permission_warnings(data_dir: str | os.PathLike[str], key_path: str | os.PathLike[str] | None = None) -> list[str]:
    """One line per private place that group or others can reach (empty: all is private).

    The data dir holds the key and plaintext caches, so any group/other bit on it is reported; the key file
    is reported on any group/other bit too (``agent.keystore`` refuses to read such a key).
    """
    out: list[str] = []
    root = Path(data_dir)
    mode = _mode(root)
    if mode is not None and mode & 0o077:
        out.append(f"the data dir {root} is accessible by other users (mode {mode:04o}); it holds your agent's "
                   f"key and plaintext chats: chmod 700 {root}")
    if key_path is not None:
        key = Path(key_path)
        key_mode = _mode(key)
        if key_mode is not None and key_mode & 0o077:
            out.append(f"the key file {key} is accessible by other users (mode {key_mode:04o}): chmod 600 {key}")
    if root.is_dir():
        try:
            entries = sorted(root.iterdir())
        except OSError:
            entries = []
        for entry in entries:
            if entry.name.endswith((".sqlite3", *(".sqlite3" + s for s in SQLITE_SIDE_FILES))) and entry.is_file():
                file_mode = _mode(entry)
                if file_mode is not None and file_mode & 0o077:
                    out.append(f"{entry} is readable by other users (mode {file_mode:04o}): chmod 600 {entry}")
    return out


# --- disk full -----------------------------------------------------------------------------------------


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the disk or the database is full."""
    current: BaseException | None = exc
    seen = 0
    while current is not None and seen < 8:
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(current, sqlite3.Error):
            code = getattr(current, "sqlite_errorcode", None)
            if code == sqlite3.SQLITE_FULL or "database or disk is full" in str(current):
                return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False


def storage_error_message(exc: BaseException, what: str, path: str | os.PathLike[str] | None = None) -> str:
    """One line for a failed write of ``what`` (e.g. "the conversation"), "disk full" first when that is why.

    It reads well on its own and after a caller's prefix ("the conversation was not saved: <this>")."""
    where = f" ({path})" if path is not None else ""
    if is_disk_full(exc):
        return f"disk full: {what} could not be written{where}; free some space and try again"
    return f"{what} could not be written{where}: {exc}"


def ensure_data_dir(data_dir: str | os.PathLike[str]) -> Path:
    """Create the data dir (0700 when we create it: it holds the key, the chats and the memory caches). Here, not
    beside the key: reading a chat (`didactyl --continue`'s first frame) needs the folder, not the key's modules."""
    path = Path(data_dir)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    except OSError as exc:
        raise ConfigError(f"cannot create the data dir {path}: {exc.strerror}", "Data dir") from None
    return path
