"""The agent's secret key: ``$DIDACTYL_NSEC``, else ``<data dir>/agent.key`` (created on first run, mode 0600).

The key file holds one line, the ``nsec1…`` string. A key file that group or others can read is refused
with the command that fixes it: a leaked key is a lost identity and a readable memory.
Nothing here ever puts the secret into an error message.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError, NostrError
from ...nostr.keys import SecretKey
from ..private_files import ensure_data_dir

KEY_FILE_NAME = "agent.key"
ENV_NSEC = "DIDACTYL_NSEC"


@dataclass(frozen=True, slots=True)
class LoadedKey:
    """The key and where it came from ("env", "file" or "created")."""

    key: SecretKey
    source: str
    path: Path | None


def key_file_path(data_dir: Path) -> Path:
    return Path(data_dir) / KEY_FILE_NAME


def check_key_file_mode(path: Path) -> None:
    """Refuse a key file that group or others can read or write."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc.strerror}", "Key file") from None
    if mode & 0o077:
        raise ConfigError(
            f"the key file {path} is readable by other users (mode {mode:04o}); "
            f"make it private with: chmod 600 {path}",
            "Key file",
        )


def read_key_file(path: Path) -> SecretKey:
    check_key_file_mode(path)
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc}", "Key file") from None
    try:
        return SecretKey.parse(text.strip())
    except NostrError:
        # Never echo the file's content: it may be a (slightly damaged) secret.
        raise NostrError(
            f"the key file {path} does not hold a valid nsec1… or 64-hex key "
            f"(move it away and run `didactyl keygen` for a new one)",
            "Bad key",
        ) from None


def _exists(path: Path) -> ConfigError:
    return ConfigError(f"{path} already exists; use --force to replace it (the old key is lost)", "Key file")


def write_key_file(path: Path, key: SecretKey, *, force: bool = False) -> Path:
    """Write ``key`` as a 0600 file; an existing file is replaced only with ``force``.

    The new file is written beside the target and renamed over it, so a crash never leaves half a key.
    """
    path = Path(path)
    ensure_data_dir(path.parent)
    if path.exists() and not force:
        raise _exists(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (key.nsec() + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o600)  # in case an odd filesystem widened it
        if force:
            os.replace(tmp, path)
        else:
            # link() fails if the name exists: two first runs at once never overwrite each other's key.
            os.link(tmp, path)
            tmp.unlink()
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        raise _exists(path) from None
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write the key file {path}: {exc.strerror}", "Key file") from None
    return path


def load_agent_key(data_dir: Path, env: Mapping[str, str] | None = None, *, create: bool = True) -> LoadedKey:
    """``$DIDACTYL_NSEC`` wins; else the key file; else (``create``) a new key written to the key file."""
    env = os.environ if env is None else env
    raw = env.get(ENV_NSEC, "")
    if raw.strip():
        try:
            return LoadedKey(SecretKey.parse(raw), "env", None)
        except NostrError:
            raise NostrError(f"${ENV_NSEC} is not a valid nsec1… or 64-hex secret key", "Bad key") from None
    path = key_file_path(data_dir)
    if path.exists():
        return LoadedKey(read_key_file(path), "file", path)
    if not create:
        raise ConfigError(f"no agent key yet ({path} does not exist); run `didactyl keygen`", "Key file")
    key = SecretKey.generate()
    try:
        write_key_file(path, key)
    except ConfigError:
        if path.exists():  # another instance created it a moment ago: use theirs
            return LoadedKey(read_key_file(path), "file", path)
        raise
    return LoadedKey(key, "created", path)
