"""Which direct messages a conversation already holds, by rumor id (``attach``: the conversation with an agent that
runs elsewhere is filled from the relays, and a message seen once is never added twice). SQLite, 0600, bounded."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from ..private_files import connect_private, tighten_sqlite_files

MAX_ROWS = 50_000  # the oldest ids leave first past it


class SeenMessages:
    def __init__(self, path: Path | str, *, max_rows: int = MAX_ROWS) -> None:
        self._db = connect_private(path, check_same_thread=False)
        self._lock = threading.Lock()
        self.max_rows = max_rows
        with self._lock, self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS seen (rumor_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, "
                             "created_at INTEGER NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS sessions (name TEXT PRIMARY KEY, session_id TEXT NOT NULL)")
        tighten_sqlite_files(path)

    def add_new(self, session_id: str, items: Iterable[tuple[str, int]]) -> list[str]:
        """Record ``(rumor id, created_at)`` pairs; the ids not seen before, in the order given."""
        new: list[str] = []
        with self._lock, self._db:
            for rumor_id, created_at in items:
                cursor = self._db.execute("INSERT OR IGNORE INTO seen VALUES (?, ?, ?)",
                                          (rumor_id, session_id, int(created_at)))
                if cursor.rowcount:
                    new.append(rumor_id)
            (count,) = self._db.execute("SELECT COUNT(*) FROM seen").fetchone()
            if count > self.max_rows:
                self._db.execute("DELETE FROM seen WHERE rumor_id IN (SELECT rumor_id FROM seen ORDER BY created_at "
                                 "LIMIT ?)", (count - self.max_rows,))
        return new

    def session_for(self, name: str) -> str | None:
        """The session kept for ``name`` (a conversation, e.g. the one with an agent)."""
        with self._lock:
            row = self._db.execute("SELECT session_id FROM sessions WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def bind_session(self, name: str, session_id: str) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO sessions VALUES (?, ?)", (name, session_id))

    def close(self) -> None:
        with self._lock:
            self._db.close()
