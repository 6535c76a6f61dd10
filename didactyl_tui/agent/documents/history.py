"""Document history: every version of each of the agent's documents this app has seen, ours and other devices'.

Versions are stored as the signed, *encrypted* events exactly as they travel; plaintext exists only in
memory, when a caller decrypts a version to show or diff it. A rollback is a new save through the
normal path (the store's job), never a rewrite of history.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import AgentError
from ...nostr.event import Event
from ...nostr.replaceable import sql_newest_first
from ..private_files import open_private_wal

UNUSABLE_NOTE = "not used: "  # + the reason: a version that does not decrypt, parse or pass the checks
OLD_UNREADABLE_NOTE = "does not decrypt with this key"  # the note older versions of the app wrote
REFUSED_NOTE = "not published: a newer version from another device already existed"


def usable_note(note: str) -> bool:
    """Whether a history note leaves the version usable (not refused as unreadable, not a save never sent)."""
    return not (note.startswith(UNUSABLE_NOTE) or OLD_UNREADABLE_NOTE in note or note.startswith("not published"))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_versions (
    event_id TEXT PRIMARY KEY,
    d TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    origin TEXT NOT NULL,
    seen_at REAL NOT NULL,
    event_json TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS memory_versions_d ON memory_versions(d, created_at);
CREATE TABLE IF NOT EXISTS memory_delivered (
    event_id TEXT PRIMARY KEY,
    at REAL NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class DocumentVersion:
    event: Event
    d: str
    origin: str  # "local" (saved here) | "remote" (seen on a relay)
    seen_at: float
    note: str  # e.g. "lost to a newer version from another device"

    @property
    def event_id(self) -> str:
        return self.event.id

    @property
    def created_at(self) -> int:
        return self.event.created_at


class DocumentHistory:
    def __init__(self, db_path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.db_path = db_path
        self._clock = clock
        self._lock = threading.Lock()
        try:
            # 0600 whatever the data dir's mode or the umask (agent.private_files).
            self._db = open_private_wal(db_path, timeout=5.0, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise AgentError(f"cannot open memory history {db_path}: {exc}", "History") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def record(self, ev: Event, origin: str, note: str = "") -> bool:
        """Keep ``ev`` (idempotent). Returns True when it was new."""
        try:
            with self._lock:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO memory_versions(event_id,d,created_at,origin,seen_at,event_json,note)"
                    " VALUES (?,?,?,?,?,?,?)",
                    (ev.id, ev.d_tag, ev.created_at, origin, self._clock(), ev.to_json(), note),
                )
                return cur.rowcount == 1
        except sqlite3.OperationalError as exc:
            raise AgentError(f"cannot write memory history {self.db_path}: {exc}", "History") from None

    def annotate(self, event_id: str, note: str) -> None:
        with self._lock:
            self._db.execute("UPDATE memory_versions SET note=? WHERE event_id=?", (note, event_id))

    def mark_delivered(self, event_id: str) -> None:
        """A relay acknowledged or served this version: from now on other writers could have read it."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO memory_delivered(event_id, at) VALUES (?,?)",
                             (event_id, self._clock()))

    def delivered_at(self, event_id: str) -> float | None:
        with self._lock:
            row = self._db.execute("SELECT at FROM memory_delivered WHERE event_id=?", (event_id,)).fetchone()
        return float(row[0]) if row else None

    def versions(self, d: str, author: str | None = None, kind: int | None = None) -> list[DocumentVersion]:
        """Newest first (NIP-01 order: created_at desc, then lowest id); only ``author``'s when given
        (after a key change the old key's versions stay apart), only of ``kind`` when given (the replaceable kinds
        0, 3 and 10002 share ``d = ""``)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT event_json, d, origin, seen_at, note FROM memory_versions WHERE d=?"
                f" ORDER BY {sql_newest_first(id_column='event_id')}",
                (d,),
            ).fetchall()
        versions = [DocumentVersion(Event.from_json(r[0]), r[1], r[2], float(r[3]), r[4]) for r in rows]
        return [v for v in versions
                if (author is None or v.event.pubkey == author) and (kind is None or v.event.kind == kind)]

    def get(self, event_id: str) -> DocumentVersion | None:
        with self._lock:
            r = self._db.execute(
                "SELECT event_json, d, origin, seen_at, note FROM memory_versions WHERE event_id=?", (event_id,)
            ).fetchone()
        return DocumentVersion(Event.from_json(r[0]), r[1], r[2], float(r[3]), r[4]) if r else None
