"""The direct-message ledger: what became of each message, the session of each conversation, and the outbox of
signed reply wraps. One SQLite file in the data dir (``dm-ledger.sqlite3``, 0600), so a reply is written and its
message marked in one transaction.

A message (keyed by its rumor id) goes ``received`` (claimed by this run) → ``answering`` (the model's turn)
→ ``written`` (the signed reply waits in the outbox; the model is never asked again) → ``delivered`` (the wrap
to the sender was accepted by a relay the sender reads; ``detail`` names them) or ``given_up`` (not delivered
within the bound; ``detail`` says why). ``elsewhere``: another instance with the same key answered it (its
own copy of the reply came back). A message received or answering by a run that ended is offered again.

Outbox rows are the reply's gift wraps, one per recipient (the sender, the other members of a group, the
agent's own copy). Each is retried with backoff until a relay accepts it or the bound passes; only the
sender's wrap decides whether the message was delivered. Synchronous and thread-safe: the service calls it
through ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ...errors import AgentError
from ...nostr.event import Event
from ..private_files import is_disk_full, open_private_wal, storage_error_message

MAX_LEDGER_ROWS = 100_000  # finished messages beyond this are forgotten, oldest first
OUTBOX_KEEP_S = 7 * 24 * 3600  # finished outbox rows are kept this long (for the status), then removed

RECEIVED = "received"
ANSWERING = "answering"
WRITTEN = "written"
DELIVERED = "delivered"
GIVEN_UP = "given_up"
ELSEWHERE = "elsewhere"
IN_PROGRESS = (RECEIVED, ANSWERING)
FINISHED = (DELIVERED, GIVEN_UP, ELSEWHERE)
_LEGACY = {"pending": RECEIVED, "answered": DELIVERED}  # the states of the first ledger

WRAP_PENDING = "pending"
WRAP_DELIVERED = "delivered"
WRAP_GIVEN_UP = "given_up"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dm_seen (
    rumor_id TEXT PRIMARY KEY,
    sender TEXT NOT NULL,
    state TEXT NOT NULL,
    run_id TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS dm_seen_by_age ON dm_seen(updated_at);
CREATE TABLE IF NOT EXISTS dm_rooms (
    counterpart TEXT PRIMARY KEY,  -- the conversation: its members other than the agent, sorted, comma-joined
    session_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS dm_outbox (
    wrap_id TEXT PRIMARY KEY,
    rumor_id TEXT NOT NULL,        -- the message answered
    recipient TEXT NOT NULL,
    for_sender INTEGER NOT NULL,   -- 1: the wrap whose delivery answers the message
    wrap_json TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    written_at REAL NOT NULL,
    relays TEXT NOT NULL DEFAULT '{}',
    last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS dm_outbox_due ON dm_outbox(state, next_attempt_at);
"""
_ADDED_COLUMNS = {"room": "TEXT NOT NULL DEFAULT ''", "detail": "TEXT NOT NULL DEFAULT ''"}


@dataclass(frozen=True, slots=True)
class MessageRecord:
    rumor_id: str
    sender: str
    state: str
    run_id: str
    updated_at: float
    room: str  # the conversation key (see dm_inbox.room_key)
    detail: str  # delivered: the relays; given_up: the reason


@dataclass(frozen=True, slots=True)
class PendingWrap:
    wrap: Event
    rumor_id: str
    recipient: str
    for_sender: bool
    attempts: int
    written_at: float


@dataclass(frozen=True, slots=True)
class WrapOutcome:
    """What one delivery attempt changed."""

    rumor_id: str
    recipient: str
    for_sender: bool
    state: str  # of the wrap: pending, delivered or given_up
    accepted_by: tuple[str, ...]
    message_state: str | None  # the message's new state when this attempt changed it
    detail: str  # the relays that took it, or the last errors
    attempts: int  # this one included


class DmLedger:
    def __init__(self, db_path: str | Path, *, clock: Callable[[], float] = time.time,
                 max_rows: int = MAX_LEDGER_ROWS) -> None:
        self._clock, self.max_rows = clock, max_rows
        self._lock = threading.RLock()
        self.path = str(db_path)
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = open_private_wal(self.path, check_same_thread=False, timeout=5.0, isolation_level=None)
            # WAL + NORMAL: a commit survives the process being killed (kill -9), not a power cut; a message
            # whose state was lost that way is answered again at worst.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(dm_seen)")}
            for column, spec in _ADDED_COLUMNS.items():
                if column not in have:
                    self._db.execute(f"ALTER TABLE dm_seen ADD COLUMN {column} {spec}")
            for old, new in _LEGACY.items():
                self._db.execute("UPDATE dm_seen SET state = ? WHERE state = ?", (new, old))
        except (OSError, sqlite3.Error) as exc:
            reason = "disk full" if is_disk_full(exc) else str(exc)
            raise AgentError(f"cannot open the DM ledger {self.path}: {reason}", "Direct messages") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self, fn: Callable[[sqlite3.Connection], object]) -> object:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(self._db)
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
                return out
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                if is_disk_full(exc):
                    raise AgentError(storage_error_message(exc, "the direct message's state", Path(self.path)),
                                     "Direct messages") from None
                raise AgentError(f"the DM ledger {self.path} is not writable: {exc}", "Direct messages") from None

    # --- messages ------------------------------------------------------------------------------------
    def record(self, rumor_id: str) -> MessageRecord | None:
        with self._lock:
            row = self._db.execute("SELECT rumor_id, sender, state, run_id, updated_at, room, detail FROM dm_seen "
                                   "WHERE rumor_id = ?", (rumor_id,)).fetchone()
        return MessageRecord(*row) if row else None

    def state(self, rumor_id: str) -> tuple[str, str] | None:
        """``(state, run_id)`` of a message, or None if never seen."""
        rec = self.record(rumor_id)
        return (rec.state, rec.run_id) if rec else None

    def claim(self, rumor_id: str, sender: str, run_id: str, room: str = "") -> bool:
        """True when this run may answer: never seen, or left received/answering by a run that ended (one run
        answers per data dir at a time, so any other run holding it has ended)."""

        def run(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT state, run_id FROM dm_seen WHERE rumor_id = ?", (rumor_id,)).fetchone()
            if row is not None and not (row[0] in IN_PROGRESS and row[1] != run_id):
                return False
            db.execute("INSERT OR REPLACE INTO dm_seen (rumor_id, sender, state, run_id, updated_at, room, detail) "
                       "VALUES (?, ?, ?, ?, ?, ?, '')", (rumor_id, sender, RECEIVED, run_id, self._clock(), room))
            return True

        claimed = bool(self._tx(run))
        if claimed:
            self.prune()
        return claimed

    def _move(self, rumor_id: str, run_id: str, frm: Iterable[str], to: str) -> bool:
        states = tuple(frm)
        marks = ",".join("?" * len(states))
        return bool(self._tx(lambda db: db.execute(
            f"UPDATE dm_seen SET state = ?, updated_at = ? WHERE rumor_id = ? AND run_id = ? AND state IN ({marks})",
            (to, self._clock(), rumor_id, run_id, *states)).rowcount))

    def start_answering(self, rumor_id: str, run_id: str) -> bool:
        """The model's turn begins; False when the message is no longer this run's (answered elsewhere)."""
        return self._move(rumor_id, run_id, (RECEIVED,), ANSWERING)

    def release(self, rumor_id: str, run_id: str) -> None:
        """Give up this run's claim (the turn failed): a later delivery of the message, or a later run, answers it."""
        self._tx(lambda db: db.execute(
            f"DELETE FROM dm_seen WHERE rumor_id = ? AND run_id = ? AND state IN ({','.join('?' * len(IN_PROGRESS))})",
            (rumor_id, run_id, *IN_PROGRESS)))

    def note_own_copy(self, rumor_id: str) -> bool:
        """Our own copy of a reply to ``rumor_id`` came back. A message this ledger has a reply for keeps its
        state (only the sender's wrap says it was delivered); one it has none for was answered by another
        instance with the same key: ``elsewhere``, never answered here. True when it was marked so."""

        def run(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT state FROM dm_seen WHERE rumor_id = ?", (rumor_id,)).fetchone()
            if row is not None and row[0] not in IN_PROGRESS:
                return False
            db.execute("INSERT INTO dm_seen (rumor_id, sender, state, run_id, updated_at) VALUES (?, '', ?, "
                       "'own-copy', ?) ON CONFLICT(rumor_id) DO UPDATE SET state = excluded.state, "
                       "run_id = excluded.run_id, updated_at = excluded.updated_at", (rumor_id, ELSEWHERE,
                                                                                      self._clock()))
            return True

        return bool(self._tx(run))

    def write_reply(self, rumor_id: str, run_id: str, wraps: Iterable[tuple[str, Event, bool]]) -> bool:
        """Store the reply's signed wraps (``(recipient, wrap, for_sender)``) and mark the message ``written``, in
        one transaction. False (nothing stored) when the message is no longer this run's."""
        now = self._clock()
        rows = [(w.id, rumor_id, recipient, int(for_sender), w.to_json(), WRAP_PENDING, now, now)
                for recipient, w, for_sender in wraps]

        def run(db: sqlite3.Connection) -> bool:
            moved = db.execute(f"UPDATE dm_seen SET state = ?, updated_at = ? WHERE rumor_id = ? AND run_id = ? "
                               f"AND state IN ({','.join('?' * len(IN_PROGRESS))})",
                               (WRITTEN, now, rumor_id, run_id, *IN_PROGRESS)).rowcount
            if not moved:
                return False
            db.executemany("INSERT OR IGNORE INTO dm_outbox (wrap_id, rumor_id, recipient, for_sender, wrap_json, "
                           "state, next_attempt_at, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            return True

        return bool(self._tx(run))

    def counts(self) -> dict[str, int]:
        """Messages by state (written, delivered, given_up, elsewhere; received/answering of any run)."""
        with self._lock:
            return dict(self._db.execute("SELECT state, COUNT(*) FROM dm_seen GROUP BY state").fetchall())

    def given_up(self, limit: int = 5) -> list[MessageRecord]:
        """The messages most recently given up, newest first (for the status)."""
        with self._lock:
            rows = self._db.execute("SELECT rumor_id, sender, state, run_id, updated_at, room, detail FROM dm_seen "
                                    "WHERE state = ? ORDER BY updated_at DESC LIMIT ?", (GIVEN_UP, limit)).fetchall()
        return [MessageRecord(*r) for r in rows]

    def prune(self) -> int:
        """Forget the oldest finished messages beyond ``max_rows`` and finished outbox rows older than
        :data:`OUTBOX_KEEP_S`; returns how many messages."""
        cutoff = self._clock() - OUTBOX_KEEP_S

        def run(db: sqlite3.Connection) -> int:
            db.execute("DELETE FROM dm_outbox WHERE state != ? AND written_at < ?", (WRAP_PENDING, cutoff))
            (count,) = db.execute("SELECT COUNT(*) FROM dm_seen").fetchone()
            extra = count - self.max_rows
            if extra <= 0:
                return 0
            marks = ",".join("?" * len(FINISHED))
            return int(db.execute(f"DELETE FROM dm_seen WHERE rumor_id IN (SELECT rumor_id FROM dm_seen WHERE state "
                                  f"IN ({marks}) ORDER BY updated_at, rumor_id LIMIT ?)", (*FINISHED, extra)).rowcount)

        return int(self._tx(run))  # type: ignore[call-overload]

    # --- the outbox of reply wraps ------------------------------------------------------------------------
    def due(self, now: float | None = None, limit: int = 256) -> list[PendingWrap]:
        """Wraps waiting for a relay whose next attempt is due, oldest first."""
        t = self._clock() if now is None else now
        with self._lock:
            rows = self._db.execute("SELECT wrap_json, rumor_id, recipient, for_sender, attempts, written_at "
                                    "FROM dm_outbox WHERE state = ? AND next_attempt_at <= ? "
                                    "ORDER BY next_attempt_at, written_at LIMIT ?", (WRAP_PENDING, t, limit)).fetchall()
        return [PendingWrap(Event.from_json(r[0]), r[1], r[2], bool(r[3]), int(r[4]), float(r[5])) for r in rows]

    def next_due(self) -> float | None:
        """When the next waiting wrap is due (None: none waits)."""
        with self._lock:
            (at,) = self._db.execute("SELECT MIN(next_attempt_at) FROM dm_outbox WHERE state = ?",
                                     (WRAP_PENDING,)).fetchone()
        return None if at is None else float(at)

    def waiting(self) -> int:
        """Wraps still waiting for a relay."""
        with self._lock:
            (n,) = self._db.execute("SELECT COUNT(*) FROM dm_outbox WHERE state = ?", (WRAP_PENDING,)).fetchone()
        return int(n)

    def wake_all(self) -> None:
        """Every waiting wrap is due now (a restart, a relay that came back)."""
        self._tx(lambda db: db.execute("UPDATE dm_outbox SET next_attempt_at = 0 WHERE state = ?", (WRAP_PENDING,)))

    def wraps_of(self, rumor_id: str) -> list[tuple[str, str, dict[str, str]]]:
        """``(recipient, state, relays)`` of each wrap of the reply to ``rumor_id`` (tests, the status)."""
        with self._lock:
            rows = self._db.execute("SELECT recipient, state, relays FROM dm_outbox WHERE rumor_id = ? "
                                    "ORDER BY for_sender DESC, recipient", (rumor_id,)).fetchall()
        return [(r[0], r[1], json.loads(r[2])) for r in rows]

    def record_attempt(self, wrap_id: str, statuses: dict[str, str], *, next_attempt_at: float,
                       give_up_after_s: float) -> WrapOutcome | None:
        """Fold one attempt's per-relay statuses (``accepted`` or why not) into the wrap. Accepted by any relay:
        delivered (and, for the sender's wrap, so is the message). Not accepted and older than
        ``give_up_after_s``: given up (the message too, for the sender's wrap). Else retried at
        ``next_attempt_at``."""
        now = self._clock()

        def run(db: sqlite3.Connection) -> WrapOutcome | None:
            row = db.execute("SELECT rumor_id, recipient, for_sender, state, attempts, written_at, relays "
                             "FROM dm_outbox WHERE wrap_id = ?", (wrap_id,)).fetchone()
            if row is None or row[3] != WRAP_PENDING:
                return None
            rumor_id, recipient, for_sender, _, attempts, written_at, relays_json = row
            relays: dict[str, str] = json.loads(relays_json)
            relays.update(statuses)
            accepted = tuple(u for u, s in statuses.items() if s == "accepted")
            errors = "; ".join(f"{u}: {s}" for u, s in sorted(statuses.items()) if s != "accepted")
            errors = errors or "no relay to send it to"
            if accepted:
                state, detail = WRAP_DELIVERED, ", ".join(accepted)
            elif now - float(written_at) >= give_up_after_s:
                state, detail = WRAP_GIVEN_UP, errors
            else:
                state, detail = WRAP_PENDING, errors
            db.execute("UPDATE dm_outbox SET state = ?, attempts = ?, next_attempt_at = ?, relays = ?, last_error = ? "
                       "WHERE wrap_id = ?", (state, int(attempts) + 1, next_attempt_at,
                                             json.dumps(relays, sort_keys=True), "" if accepted else errors, wrap_id))
            message_state = None
            if for_sender and state != WRAP_PENDING:
                message_state = DELIVERED if accepted else GIVEN_UP
                reason = detail if accepted else f"not delivered within {give_up_after_s:g}s: {errors}"
                changed = db.execute("UPDATE dm_seen SET state = ?, detail = ?, updated_at = ? WHERE rumor_id = ? "
                                     "AND state = ?", (message_state, reason[:2000], now, rumor_id, WRITTEN)).rowcount
                message_state = message_state if changed else None
            return WrapOutcome(rumor_id, recipient, bool(for_sender), state, accepted, message_state, detail,
                               int(attempts) + 1)

        return self._tx(run)  # type: ignore[return-value]

    # --- conversations -------------------------------------------------------------------------------
    def session_for(self, room: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT session_id FROM dm_rooms WHERE counterpart = ?", (room,)).fetchone()
        return row[0] if row else None

    def bind_session(self, room: str, session_id: str) -> None:
        self._tx(lambda db: db.execute("INSERT OR REPLACE INTO dm_rooms VALUES (?, ?)", (room, session_id)))
