"""SQLite storage for the embedded relay: save with NIP-01 replacement, query by NIP-01 filters.

Synchronous on purpose. The server gives each connection object one thread: :class:`EventStore`
(writes, one transaction per batch) on the writer thread, :class:`EventReader` (reads, in short
transactions so no reader pins the WAL) on the reader thread; :mod:`.wal` folds the WAL back into the
database in the background, so a publish never waits for a checkpoint.

Reads are two-phase: :meth:`EventReader.plan` returns the matching rows' sequence numbers in answer
order (small integers), then :meth:`EventReader.fetch` returns their stored JSON in byte-bounded
batches. The stored JSON is served as is: nothing is parsed or re-serialised on the way out.
"""

from __future__ import annotations

import os
import sqlite3
import time
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..event import Event
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
CREATE INDEX IF NOT EXISTS events_by_author_kind ON events (pubkey, kind, created_at DESC);
CREATE TABLE IF NOT EXISTS tags (
    seq   INTEGER NOT NULL REFERENCES events (seq) ON DELETE CASCADE,
    name  TEXT NOT NULL,
    value TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tags_by_value ON tags (name, value, seq);
CREATE INDEX IF NOT EXISTS tags_by_event ON tags (seq);
"""

NEAR_QUOTA = 0.9  # within this share of a quota, the bytes in use are counted exactly before each save
ROW_OVERHEAD_BYTES = 256  # index entries and page slack per stored event, for the quota estimate
FETCH_CHUNK = 64  # rows per SELECT ... WHERE seq IN (...)


class LockBusy(sqlite3.OperationalError):
    """Another connection holds the write lock (raised only when asked not to wait for it)."""


class SaveResult(str, Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"  # this exact event is already stored
    SUPERSEDED = "superseded"  # a newer version of this replaceable/addressable event is stored
    OVER_QUOTA = "over_quota"  # storing it would take the database past its size quota


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


def _connect(path: Path, busy_timeout_ms: int) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves. check_same_thread=False because the
    # owning thread is a pool worker, not the thread that built the object; one thread uses it.
    db = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000, check_same_thread=False)
    db.execute("PRAGMA foreign_keys=ON")
    return db


class EventStore:
    """The writing side: one SQLite file in WAL mode. Not thread-safe: use it from a single thread."""

    def __init__(self, path: Path, *, max_limit: int = 5000, busy_timeout_ms: int = 5000,
                 auto_checkpoint: bool = True, max_wal_bytes: int = 64 * 1024 * 1024) -> None:
        self.path = Path(path)
        self.max_limit = max_limit
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout_ms = int(busy_timeout_ms)
        self._measured: int | None = None  # bytes in use at the last count
        self._growth = 0  # estimated bytes stored since
        self._db = _connect(self.path, busy_timeout_ms)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._max_wal_bytes = int(max_wal_bytes)
        self._wal_path = f"{self.path}-wal"
        self._db.execute(f"PRAGMA journal_size_limit={self._max_wal_bytes}")  # a WAL started over shrinks to this
        if not auto_checkpoint:
            self._db.execute("PRAGMA wal_autocheckpoint=0")  # the Checkpointer does it off the write path
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            self._db.close()
            raise sqlite3.DatabaseError(
                f"{self.path} holds relay schema version {version}; this build reads {SCHEMA_VERSION}"
            )
        self._db.executescript(_SCHEMA)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._db.execute("PRAGMA busy_timeout=0")  # _begin waits for locks itself
        self._page_size = int(self._db.execute("PRAGMA page_size").fetchone()[0])
        self._reader = EventReader(self._db, max_limit=max_limit)

    def close(self) -> None:
        self._db.close()

    def used_bytes(self) -> int:
        """Bytes the stored rows occupy (pages in use; free pages are reused before the file grows)."""
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        return int((pages - free) * self._page_size)

    # --- writes ----------------------------------------------------------------------------
    def save(self, ev: Event, quota_bytes: int | None = None) -> SaveOutcome:
        """Store a verified, non-ephemeral event, applying NIP-01 replacement (see :meth:`save_batch`)."""
        return self.save_batch([(ev, quota_bytes)])[0]

    def save_batch(self, entries: Sequence[tuple[Event, int | None]], *, wait_for_lock: bool = True
                   ) -> list[SaveOutcome]:
        """Store events in one transaction; each with the byte quota that applies to it (None: none).
        With ``wait_for_lock`` False, a lock held by another connection raises :class:`LockBusy` at
        once instead of waiting up to the busy timeout (nothing was written).

        For a replaceable/addressable event the stored version with the newest ``created_at``
        (ties: lowest id) is kept and every other version is deleted; a version older than the
        stored one is not stored. Any SQLite error rolls the whole batch back and is raised.
        """
        for ev, _quota in entries:
            if is_ephemeral(ev.kind):
                raise ValueError("ephemeral events are never stored")
        db = self._db
        quotas = [q for _e, q in entries if q is not None]
        self._begin(wait_for_lock)
        try:
            used = self._used_for(min(quotas)) if quotas else 0
            out = []
            for ev, quota in entries:
                raw = ev.to_json()
                cost = len(raw.encode()) * 3 // 2 + ROW_OVERHEAD_BYTES * (1 + len(ev.tags))
                near = quota is not None and used + cost > quota * NEAR_QUOTA
                if near:
                    used = self.used_bytes()  # counted exactly (inside the transaction) near the quota
                if quota is not None and used + cost > quota:
                    out.append(SaveOutcome(SaveResult.OVER_QUOTA))
                    continue
                outcome = self._save_one(ev, raw)
                if outcome.result is SaveResult.STORED:
                    used = self.used_bytes() if near else used + cost
                    self._growth += cost
                out.append(outcome)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._measured = None
            raise
        return out

    def _used_for(self, quota: int) -> int:
        """Bytes in use: counted now, or estimated from the last count while far from ``quota``."""
        if self._measured is None or self._measured + self._growth > quota * NEAR_QUOTA / 2:
            self._measured, self._growth = self.used_bytes(), 0
        return self._measured + self._growth

    def _begin(self, wait_for_lock: bool) -> None:
        """BEGIN IMMEDIATE. The connection never waits inside SQLite (busy timeout 0): we retry here,
        up to the busy timeout, or not at all (:class:`LockBusy`) when ``wait_for_lock`` is False."""
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while True:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if not wait_for_lock:
                    raise LockBusy(str(exc)) from exc
                if time.monotonic() >= deadline:
                    raise
            time.sleep(0.002)

    def _save_one(self, ev: Event, raw: str) -> SaveOutcome:
        db = self._db
        if db.execute("SELECT 1 FROM events WHERE id = ?", (ev.id,)).fetchone():
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
                    return SaveOutcome(SaveResult.SUPERSEDED)
            for seq, other_id, _at in rows:
                db.execute("DELETE FROM events WHERE seq = ?", (seq,))
                removed.append(other_id)
        cur = db.execute(
            "INSERT INTO events (id, pubkey, created_at, kind, d, raw) VALUES (?, ?, ?, ?, ?, ?)",
            (ev.id, ev.pubkey, ev.created_at, ev.kind, key, raw),
        )
        seq = cur.lastrowid
        # NIP-01 indexes single-letter tags only; the first value is what filters match.
        tag_rows = [(seq, t[0], t[1]) for t in ev.tags if len(t) >= 2 and len(t[0]) == 1]
        if tag_rows:
            db.executemany("INSERT INTO tags (seq, name, value) VALUES (?, ?, ?)", tag_rows)
        return SaveOutcome(SaveResult.STORED, tuple(removed))

    def wal_oversized(self) -> bool:
        """The WAL file is past ``max_wal_bytes``: it has been growing instead of starting over (:mod:`.wal`)."""
        try:
            return os.stat(self._wal_path).st_size > self._max_wal_bytes
        except OSError:
            return False

    def fold_wal(self) -> tuple[int, int]:
        """Checkpoint from the writing connection, between transactions (see :mod:`.wal`): nothing is
        appended meanwhile, so it completes and the next commit starts the WAL over. Returns the WAL's
        (frames, frames copied)."""
        _busy, frames, copied = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(frames), int(copied)

    # --- reads on the writer's own connection (tests, the app's helpers) ----------------------
    def query(self, filters: Iterable[Mapping[str, Any]]) -> list[Event]:
        """Events matching any filter, newest first (ties: lowest id first)."""
        return self._reader.query(filters)

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def get(self, event_id: str) -> Event | None:
        row = self._db.execute("SELECT raw FROM events WHERE id = ?", (event_id,)).fetchone()
        return Event.from_json(row[0]) if row else None


class EventReader:
    """The reading side: a connection of its own (or the store's), used from a single thread."""

    def __init__(self, db: sqlite3.Connection | Path, *, max_limit: int = 5000, busy_timeout_ms: int = 5000) -> None:
        self._db = db if isinstance(db, sqlite3.Connection) else _connect(Path(db), busy_timeout_ms)
        self.max_limit = max_limit

    def close(self) -> None:
        self._db.close()

    def plan(self, filters: Sequence[Mapping[str, Any]]) -> array[int]:
        """Sequence numbers of the events matching any filter, in answer order: newest first (ties:
        lowest id). Each filter's ``limit`` (capped at ``max_limit``) applies to that filter alone, as
        NIP-01 describes for the initial query of a subscription."""
        if len(filters) == 1:
            return array("q", (seq for seq, _at, _id in self._rows(filters[0])))
        found: dict[int, tuple[int, str]] = {}
        for f in filters:
            for seq, at, eid in self._rows(f):
                found[seq] = (-at, eid)
        return array("q", sorted(found, key=found.__getitem__))

    def fetch(self, seqs: Sequence[int], max_bytes: int, start: int = 0) -> tuple[list[str], int]:
        """Stored JSON of ``seqs[start:]`` in order, stopping once ``max_bytes`` is reached (at least
        one row); also returns the index to resume from. Rows deleted since :meth:`plan` are skipped."""
        out: list[str] = []
        size = 0
        done = start
        while done < len(seqs) and size < max_bytes:
            chunk = seqs[done:done + FETCH_CHUNK]
            rows = dict(self._db.execute(
                f"SELECT seq, raw FROM events WHERE seq IN ({','.join('?' * len(chunk))})", tuple(chunk)
            ).fetchall())
            for seq in chunk:
                done += 1
                raw = rows.get(seq)
                if raw is not None:
                    out.append(raw)
                    size += len(raw)
                    if size >= max_bytes:
                        break
        return out, done

    def plan_and_fetch(self, filters: Sequence[Mapping[str, Any]], max_bytes: int
                       ) -> tuple[array[int], list[str], int]:
        """:meth:`plan`, then the first :meth:`fetch`, in one call (one thread hop for small results)."""
        seqs = self.plan(filters)
        raws, at = self.fetch(seqs, max_bytes)
        return seqs, raws, at

    def query(self, filters: Iterable[Mapping[str, Any]]) -> list[Event]:
        seqs = self.plan(list(filters))
        raws, _ = self.fetch(seqs, max_bytes=2**62)
        return [Event.from_json(raw) for raw in raws]

    def _rows(self, f: Mapping[str, Any]) -> list[tuple[int, int, str]]:
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
        # With ids, or authors and kinds, the events index finds a handful of rows: check their tags
        # one by one (flat however common the tag value is). Otherwise the tag index drives.
        per_row = bool(f.get("ids")) or bool(f.get("authors") and f.get("kinds"))
        for key, values in f.items():
            if len(key) == 2 and key[0] == "#":
                if not values:
                    return []
                marks = ",".join("?" * len(values))
                where.append(
                    f"EXISTS (SELECT 1 FROM tags WHERE tags.seq = events.seq AND name = ? AND value IN ({marks}))"
                    if per_row else f"seq IN (SELECT seq FROM tags WHERE name = ? AND value IN ({marks}))"
                )
                params.append(key[1])
                params.extend(values)
        limit = f.get("limit")
        limit = self.max_limit if limit is None else min(int(limit), self.max_limit)
        if limit <= 0:
            return []
        sql = "SELECT seq, created_at, id FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, id ASC LIMIT ?"
        params.append(limit)
        return self._db.execute(sql, params).fetchall()
