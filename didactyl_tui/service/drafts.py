"""<data dir>/drafts/<memory type>.json: the memory editor's unsaved text, so a crash or a quit loses nothing.

Written while the user types (by the editor, on a worker thread, never on the UI loop), read back when the editor
opens again, removed once the text is saved or deliberately discarded. The file holds plaintext memory, so it is
private (0600, in a 0700 directory) like every file the app writes. Bounded: a draft longer than
:data:`DRAFT_LIMIT_FACTOR` times the memory's limit is not kept (such a text could never be saved anyway).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import AgentError
from ..whole_file import write_whole

_lock = threading.Lock()  # one write or removal at a time: a removal never races a write in flight
DRAFTS_DIR = "drafts"
DRAFT_LIMIT_FACTOR = 2
"""A draft is kept up to this many times the memory's own limit (``[memory] *_max_chars``)."""


@dataclass(frozen=True)
class Draft:
    text: str
    base_event_id: str | None  # the version the edit started from (None: nothing published yet)
    saved_at: float


def draft_path(data_dir: Path, memory_type: str) -> Path:
    return Path(data_dir) / DRAFTS_DIR / f"{memory_type}.json"


def read_draft(data_dir: Path, memory_type: str, limit_chars: int) -> Draft | None:
    """The kept draft, or None (missing, unreadable, malformed or over the bound: nothing to restore)."""
    try:
        raw = draft_path(data_dir, memory_type).read_text("utf-8")
        data = json.loads(raw)
        text, base, saved_at = data["text"], data.get("base_event_id"), float(data.get("saved_at", 0))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(text, str) or len(text) > limit_chars * DRAFT_LIMIT_FACTOR:
        return None
    return Draft(text, base if isinstance(base, str) else None, saved_at)


def write_draft(data_dir: Path, memory_type: str, text: str, base_event_id: str | None, limit_chars: int,
                *, now: float | None = None) -> bool:
    """Keep ``text`` as the draft (atomically, 0600). False when it is over the bound and was not kept."""
    if len(text) > limit_chars * DRAFT_LIMIT_FACTOR:
        return False
    path = draft_path(data_dir, memory_type)
    body = json.dumps({"text": text, "base_event_id": base_event_id,
                       "saved_at": time.time() if now is None else now})
    try:
        with _lock:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(path.parent, 0o700)  # an existing, wider directory is tightened too
            write_whole(path, body)
    except OSError as exc:
        raise AgentError(f"cannot keep the editor's draft in {path}: {exc.strerror}", "Draft") from None
    return True


def remove_draft(data_dir: Path, memory_type: str) -> None:
    try:
        with _lock:
            draft_path(data_dir, memory_type).unlink(missing_ok=True)
    except OSError as exc:
        raise AgentError(f"cannot remove the editor's draft: {exc.strerror}", "Draft") from None
