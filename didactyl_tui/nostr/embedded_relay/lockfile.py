"""The files by which the one embedded relay of a data dir is found, and the OS locks that keep it one.

In the data dir:

* ``relay.key`` — the data dir's relay secret (hex), made once by whichever launcher or relay needs it first. Only
  the data dir's owner can read it: a relay proves with it that it is this data dir's relay (see
  :mod:`didactyl_tui.nostr.relay_proof`). It never leaves the file and the processes of that user.
* ``relay.lock`` — JSON written by the running relay process (pid, host, port, instance id, database
  path, the options it enforces with their digest, and the address it was last asked for with why it does not
  listen there, when it does not); replaced atomically (also after a reload),
  removed when that process exits. It holds no secret and only *points* at a relay: a reader trusts it
  once the server on its port proves, for a fresh nonce, that it is the instance the file names. A lock
  file another user wrote is never read.
* ``relay.launch.lock`` — ``flock``-ed by a process while it looks for a relay or starts one, so two
  processes starting at once end with one relay.

Beside the database:

* ``<database>.owner`` — ``flock``-ed by the relay process for its whole life: no second relay ever opens
  the same database, and a crashed relay (the kernel drops its lock) is told apart from a live one
  without trusting pids.

Every file is created 0600.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...errors import RelayError
from ..relay_proof import KEY_BYTES, ProofKey

LOCK_FILE = "relay.lock"
KEY_FILE = "relay.key"
LAUNCH_LOCK_FILE = "relay.launch.lock"
LOG_FILE = "relay.log"
RELAY_DB = "relay.sqlite3"
_MAX_LOCK_BYTES = 128 * 1024  # ~2 KB with the options (at most 64 KiB of them); anything bigger is not ours


def owner_lock_path(db_path: Path) -> Path:
    """The file the relay process serving ``db_path`` keeps ``flock``-ed."""
    return db_path.with_name(db_path.name + ".owner")


def open_private(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """Open (creating 0600) and make sure a file we own is 0600 whatever created it first."""
    fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
    with contextlib.suppress(OSError):  # a file of another user stays as it is (and is not ours to fix)
        os.fchmod(fd, 0o600)
    return fd


@dataclass(frozen=True, slots=True)
class AskedAddress:
    """Where the relay was last asked to listen (by its start, or by a launcher's request) and, when it does not
    listen there, why not. ``port`` 0 asks for any free port."""

    host: str
    port: int
    request: str = ""  # the launcher's request this answers ("": the relay's start)
    refused: str = ""  # "" (it listens there), or TAKEN, CLIENTS or UNAVAILABLE
    detail: str = ""  # why not, in one line ("port 7447 is taken by another program", "2 clients were connected")

    TAKEN = "taken"  # another program listens on the port
    CLIENTS = "clients"  # clients are connected: a move would cut them off
    UNAVAILABLE = "unavailable"  # the address cannot be listened on (not this machine's, no permission...)

    @classmethod
    def from_dict(cls, raw: Any) -> AskedAddress:
        if not isinstance(raw, dict):
            raise ValueError("bad asked address")
        values = {k: raw.get(k, "") for k in ("host", "request", "refused", "detail")}
        port = raw.get("port")
        if not all(isinstance(v, str) for v in values.values()) or isinstance(port, bool) or \
                not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError("bad asked address")
        return cls(values["host"], port, values["request"], values["refused"], values["detail"][:300])


@dataclass(frozen=True, slots=True)
class RelayLock:
    """What ``relay.lock`` says: which process serves which database where, and its instance token."""

    pid: int
    host: str
    port: int
    token: str
    db: str
    started_at: float
    options_digest: str = ""  # of the options it enforces (options.digest); "" from an older relay
    options: dict[str, Any] = field(default_factory=dict)  # what it enforces (options.normalized)
    asked: AskedAddress | None = None  # None from an older relay, which cannot move

    @property
    def connect_host(self) -> str:
        """Where a client reaches it (a relay listening on every address is reached on loopback)."""
        return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)

    @property
    def url(self) -> str:
        host = self.connect_host
        return f"ws://[{host}]:{self.port}" if ":" in host else f"ws://{host}:{self.port}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RelayLock:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        types: dict[str, type | tuple[type, ...]] = {
            "pid": int, "host": str, "port": int, "token": str, "db": str, "started_at": (int, float)}
        for key, kind in types.items():
            value = raw.get(key)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise ValueError(f"bad {key!r}")
        if not 0 < raw["port"] < 65536 or raw["pid"] <= 0 or not raw["token"]:
            raise ValueError("out of range")
        digest, options = raw.get("options_digest", ""), raw.get("options", {})
        if not isinstance(digest, str) or not isinstance(options, dict):
            raise ValueError("bad options")
        asked = AskedAddress.from_dict(raw["asked"]) if raw.get("asked") is not None else None
        return cls(raw["pid"], raw["host"], raw["port"], raw["token"], raw["db"], float(raw["started_at"]),
                   digest, options, asked)


def _read_own(path: Path, max_bytes: int, *, private: bool = False) -> tuple[bytes | None, str]:
    """A regular file's first ``max_bytes + 1`` bytes, if this user owns it (and, ``private``, nobody else may read
    it): (data, "") or (None, why not); (None, "") when it is missing or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return None, "it is a symbolic link" if exc.errno == errno.ELOOP else ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "it is not a regular file"
        if st.st_uid != os.geteuid():
            return None, f"it was written by another user (uid {st.st_uid})"
        if private and st.st_mode & 0o077:
            return None, f"group or others may read it (mode {stat.S_IMODE(st.st_mode):o})"
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), ""
    except OSError:
        return None, ""
    finally:
        os.close(fd)


def inspect_lock(path: Path) -> tuple[RelayLock | None, str]:
    """The lock file's content, or (None, why it is not ours to trust): "" when it is missing or garbage, a
    reason when it is a file no relay of this user wrote (another user's, or not a regular file)."""
    data, problem = _read_own(path, _MAX_LOCK_BYTES)
    if data is None or len(data) > _MAX_LOCK_BYTES:
        return None, problem
    try:
        return RelayLock.from_json(data.decode("utf-8")), ""
    except (ValueError, UnicodeDecodeError):
        return None, ""


def read_lock(path: Path) -> RelayLock | None:
    """The lock file's content, or None when it is missing, unreadable, garbage or another user's."""
    return inspect_lock(path)[0]


def read_proof_key(data_dir: Path) -> ProofKey | None:
    """The data dir's relay secret (``relay.key``); None when there is none yet. Raises :class:`RelayError` when the
    file is there but proves nothing: another user's, readable by group or others, a link, or not a key."""
    path = data_dir / KEY_FILE
    data, problem = _read_own(path, 4 * KEY_BYTES, private=True)
    if data is None and not problem:
        if not os.path.lexists(path):
            return None
        problem = "it cannot be read"
    if not problem:
        try:
            return ProofKey.from_hex((data or b"").decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            problem = f"it does not hold a key of {KEY_BYTES} bytes"
    raise RelayError(f"{path} cannot prove the embedded relay's identity ({problem}); stop the relay and remove the "
                     "file (a new one is made)")


def ensure_proof_key(data_dir: Path) -> ProofKey:
    """The data dir's relay secret, made now (32 random bytes, 0600) if there is none; two processes making it at
    once end with one. Raises :class:`RelayError` as :func:`read_proof_key`, OSError when it cannot be written."""
    key = read_proof_key(data_dir)
    if key is not None:
        return key
    path = data_dir / KEY_FILE
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, ProofKey(secrets.token_bytes(KEY_BYTES)).hex().encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another process made it first: theirs is the key
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    key = read_proof_key(data_dir)
    if key is None:
        raise RelayError(f"{path} vanished as it was made")
    return key


def write_lock(path: Path, lock: RelayLock) -> None:
    """Write atomically (a reader sees the old file or the new one, never half of one)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, lock.to_json().encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def remove_lock(path: Path, token: str) -> None:
    """Remove the lock file if it is still ours (a successor's file is left alone)."""
    current = read_lock(path)
    if current is not None and current.token == token:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def remove_stale_lock(path: Path, stale: RelayLock | None) -> None:
    """Remove a lock file known stale (only if it still holds that content)."""
    if stale is not None:
        remove_lock(path, stale.token)
    elif path.exists() and read_lock(path) is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # garbage: no relay process would write it


class FileLock:
    """An exclusive ``flock`` on a file (0600), taken without blocking the event loop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        fd = open_private(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        return True

    async def acquire(self, timeout: float, interval: float = 0.05) -> bool:
        """Try until ``timeout`` seconds pass; True once held."""
        deadline = time.monotonic() + timeout
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(interval)
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock


def lock_is_held(path: Path) -> bool:
    """Whether some process holds ``flock`` on ``path`` right now (a missing file: no one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def pid_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, which nobody may have reaped, counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc here: kill(0) is all we know
    fields = stat.rpartition(")")[2].split()
    return not fields or fields[0] not in ("Z", "X")
