"""A file written whole or not at all, and private: the one way the app replaces a small file it keeps (state.toml,
the config, API keys, the remote signer's session, an invitation, the editor's draft).

The data goes to a temporary file beside the target (made 0600 and exclusively, with a name of its own: two writers
never share one), is flushed to the disk, then renamed over the target. A reader sees the old file or the new one,
never half of one; a crash leaves at most a dot-named ``.tmp`` beside it. Below every layer, as ``errors.py`` is: each
caller says a failure in its own error family, naming the file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

PRIVATE = 0o600


def write_whole(path: Path, data: str | bytes, *, mode: int = PRIVATE) -> None:
    """Replace ``path`` with ``data`` (text as UTF-8), its mode ``mode``; its folder is made (0700) when missing.
    OSError as the system says it; nothing is left behind then."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # 0600, O_EXCL
    try:
        with os.fdopen(fd, "wb") as out:
            if mode != PRIVATE:
                os.fchmod(out.fileno(), mode)
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
