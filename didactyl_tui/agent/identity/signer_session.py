"""The NIP-46 connection kept between runs: ``<data dir>/signer.json``, mode 0600.

It holds the client's secret key (the key this app signs its requests to the signer with, not the agent's), the
signer's key, the relays and the agent's public key once the signer said it (:class:`RemoteSignerSession`). A
later run starts from it without a new ``connect`` (a bunker's secret is single-use). Written beside the target and
renamed over it, so a crash never leaves half a session; a session readable by others is refused, as the key
file is. Nothing here puts the client key into an error message.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ...errors import ConfigError, NostrError
from ...nostr.nip46_session import RemoteSignerSession
from ...whole_file import write_whole
from ..private_files import ensure_data_dir

SESSION_FILE_NAME = "signer.json"
MAX_SESSION_BYTES = 64 * 1024  # a session is a few hundred bytes: anything bigger is not ours


def session_path(data_dir: Path, name: str = SESSION_FILE_NAME) -> Path:
    return Path(data_dir) / name


def read_session(data_dir: Path, name: str = SESSION_FILE_NAME) -> RemoteSignerSession | None:
    """The stored session (``name``: another signer's file, e.g. the admin's for attach), or None when there is
    none. An unreadable one is an error naming the file: it is never silently replaced (the signer would see a new
    client, and a used secret cannot connect again)."""
    path = session_path(data_dir, name)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise ConfigError(f"{path} can be read by others; fix it with: chmod 600 {path}", "Remote signer")
    if st.st_size > MAX_SESSION_BYTES:
        raise ConfigError(f"{path} is not a remote signer session (too large)", "Remote signer")
    try:
        return RemoteSignerSession.from_json(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {getattr(exc, 'strerror', None) or type(exc).__name__}",
                          "Remote signer") from None
    except NostrError as exc:
        raise ConfigError(f"{path}: {exc.message}; remove it to connect again", "Remote signer") from None


def write_session(data_dir: Path, session: RemoteSignerSession, name: str = SESSION_FILE_NAME) -> Path:
    """Store ``session`` (0600, atomically)."""
    path = session_path(ensure_data_dir(Path(data_dir)), name)
    try:
        write_whole(path, session.to_json() + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}", "Remote signer") from None
    return path
