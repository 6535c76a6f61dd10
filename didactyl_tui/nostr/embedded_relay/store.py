"""SQLite storage for the embedded relay: save with NIP-01 replacement, query by NIP-01 filters.

Synchronous on purpose: the server runs every call on one dedicated worker thread, so the
connection is only ever touched from that thread and writes are naturally serialized.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..event import Event
from ..filters import matches
from ..kinds import is_addressable, is_ephemeral, is_replaceable

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq        INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    pubkey     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    kind       INTEGER NOT NULL,
    d          TEXT,            -- replacement key: '' for replaceable, the d tag for addressable, NULL otherwise
    raw        TEXT NOT NULL    -- the event's compact JSON, served as is
);
CREATE INDEX IF NOT EXISTS events_by_time ON events (created_at DESC, id);
CREATE INDEX IF NOT EXISTS events_by_author ON events (pubkey, created_at DESC);
CREATE INDEX IF NOT EXISTS events_by_kind ON events (kind, created_at DESC);
CREATE INDEX IF NOT EXISTS events_by_address ON events (kind, pubkey, d) WHERE d IS NOT NULL;
CREATE TABLE IF NOT EXISTS tags (
    seq   INTEGER NOT NULL REFERENCES events (seq) ON DELETE CASCADE,
    name  TEXT NOT NULL,
    value TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tags_by_value ON tags (name, value, seq);
CREATE INDEX IF NOT EXISTS tags_by_event ON tags (seq);
"""


class SaveResult(str, Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"  # this exact event is already stored
    SUPERSEDED = "superseded"  # a newer version of this replaceable/addressable event is stored


@dataclass(frozen=True, slots=True)
class SaveOutcome:
    result: SaveResult
    removed_ids: tuple[str, ...] = ()  # older versions deleted by this save


def _replacement_key(ev: Event) -> str | None:
    if is_replaceable(ev.kind):
        return ""
    if is_addressable(ev.kind):
        return ev.d_tag
    return None


class EventStore:
    """One SQLite file in WAL mode. Not thread-safe: use it from a single thread."""

    def __init__(self, path: Path, *, max_limit: int = 5000, busy_timeout_ms: int = 5000) -> None:
        self.path = Path(path)
        self.max_limit = max_limit
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a save is one short transaction.
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=busy_timeout_ms / 1000)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            self._db.close()
            raise sqlite3.DatabaseError(
                f"{self.path} holds relay schema version {version}; this build reads {SCHEMA_VERSION}"
            )
        self._db.executescript(_SCHEMA)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        self._db.close()

    # --- writes ----------------------------------------------------------------------------
    def save(self, ev: Event) -> SaveOutcome:
        """Store a verified, non-ephemeral event, applying NIP-01 replacement.

        For a replaceable/addressable event the stored version with the newest ``created_at``
        (ties: lowest id) is kept and every other version is deleted; a version older than the
        stored one is not stored.
        """
        if is_ephemeral(ev.kind):
            raise ValueError("ephemeral events are never stored")
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT 1 FROM events WHERE id = ?", (ev.id,)).fetchone():
                db.execute("COMMIT")
                return SaveOutcome(SaveResult.DUPLICATE)
            key = _replacement_key(ev)
            removed: list[str] = []
            if key is not None:
                rows = db.execute(
                    "SELECT seq, id, created_at FROM events WHERE kind = ? AND pubkey = ? AND d = ?",
                    (ev.kind, ev.pubkey, key),
                ).fetchall()
                for _seq, other_id, other_at in rows:
                    if other_at > ev.created_at or (other_at == ev.created_at and other_id < ev.id):
                        db.execute("COMMIT")
                        return SaveOutcome(SaveResult.SUPERSEDED)
                for seq, other_id, _at in rows:
                    db.execute("DELETE FROM events WHERE seq = ?", (seq,))
                    removed.append(other_id)
            cur = db.execute(
                "INSERT INTO events (id, pubkey, created_at, kind, d, raw) VALUES (?, ?, ?, ?, ?, ?)",
                (ev.id, ev.pubkey, ev.created_at, ev.kind, key, ev.to_json()),
            )
            seq = cur.lastrowid
            # NIP-01 indexes single-letter tags only; the first value is what filters match.
            tag_rows = [(seq, t[0], t[1]) for t in ev.tags if len(t) >= 2 and len(t[0]) == 1]
            if tag_rows:
                db.executemany("INSERT INTO tags (seq, name, value) VALUES (?, ?, ?)", tag_rows)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return SaveOutcome(SaveResult.STORED, tuple(removed))

    # --- reads -----------------------------------------------------------------------------
    def query(self, filters: Iterable[Mapping[str, Any]]) -> list[Event]:
        """Events matching any filter, newest first (ties: lowest id first).

        Each filter's ``limit`` (capped at ``max_limit``) applies to that filter alone, as NIP-01
        describes for the initial query of a subscription.
        """
        found: dict[str, Event] = {}
        for f in filters:
            for ev in self._query_one(f):
                found.setdefault(ev.id, ev)
        out = list(found.values())
        out.sort(key=lambda e: (-e.created_at, e.id))
        return out

    def _query_one(self, f: Mapping[str, Any]) -> list[Event]:
        where: list[str] = []
        params: list[Any] = []

        def among(column: str, values: list[Any]) -> None:
            where.append(f"{column} IN ({','.join('?' * len(values))})")
            params.extend(values)

        for key, column in (("ids", "id"), ("authors", "pubkey"), ("kinds", "kind")):
            values = f.get(key)
            if values is not None:
                if not values:
                    return []  # an empty list matches nothing
                among(column, list(values))
        if f.get("since") is not None:
            where.append("created_at >= ?")
            params.append(f["since"])
        if f.get("until") is not None:
            where.append("created_at <= ?")
            params.append(f["until"])
        for key, values in f.items():
            if len(key) == 2 and key[0] == "#":
                if not values:
                    return []
                where.append(
                    f"seq IN (SELECT seq FROM tags WHERE name = ? AND value IN ({','.join('?' * len(values))}))"
                )
                params.append(key[1])
                params.extend(values)
        limit = f.get("limit")
        limit = self.max_limit if limit is None else min(int(limit), self.max_limit)
        if limit <= 0:
            return []
        sql = "SELECT raw FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, id ASC LIMIT ?"
        params.append(limit)
        out = []
        for (raw,) in self._db.execute(sql, params):
            ev = Event.from_dict(json.loads(raw))
            # Belt and braces: the SQL and filters.matches must agree; matches() has the last word.
            if matches(f, ev):
                out.append(ev)
        return out

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def get(self, event_id: str) -> Event | None:
        row = self._db.execute("SELECT raw FROM events WHERE id = ?", (event_id,)).fetchone()
        return Event.from_dict(json.loads(row[0])) if row else None
