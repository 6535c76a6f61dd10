"""The memory outbox: every memory publish is written to SQLite before it is sent.

An event stays here until relays have accepted it; until then it is retried with backoff, across
reconnects and restarts. A newer version of the same address supersedes a pending older one, so stale
content is never published after newer content — whether the newer version was saved here or seen on a
relay (the newest remote version per address is remembered, so a late local save older than it is
superseded at once). Per relay we remember who accepted it and who refused it for good
(``invalid:``/``blocked:``-style rejections are final for that relay, and so is ``replaced:``, the
answer of a relay that already holds a newer version; timeouts, ``not connected``, ``error:`` and
``rate-limited:`` are retried).

Entry states: ``pending`` (no relay accepted it yet), ``delivered`` (at least one did; others may still
be retried), ``refused`` (every relay tried refused it for good), ``superseded`` (a newer version
exists: never sent again).

Synchronous SQLite (each call is a few small statements); the publisher runs it through
``asyncio.to_thread``. Writes raise :class:`AgentError` when another process holds the file locked;
reads keep working (WAL).
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ...errors import AgentError
from ...nostr.event import Event
from ...nostr.replaceable import address_key, is_newer, is_newer_version, sql_newest_first
from ...nostr.results import Disposition, PublishOutcome, RelayVerdict, Verdict
from ..private_files import is_disk_full, open_private_wal, storage_error_message

PENDING = "pending"  # not accepted by any relay yet
DELIVERED = "delivered"  # accepted by at least one relay (others may still be retried)
REFUSED = "refused"  # every relay tried refused it for good (not retried on those relays)
SUPERSEDED = "superseded"  # a newer version of the same address exists: never sent again

# Per-relay status strings kept in OutboxEntry.relays.
RELAY_ACCEPTED = "accepted"
RELAY_REFUSED = "refused"  # "refused: <relay's reason>"
RELAY_REPLACED = "replaced"  # "replaced: <reason>": the relay holds a newer version
RELAY_RETRY = "retry"  # "retry: <verdict>[: <reason>]"
RELAY_NEEDED = "needed"  # reconcile found the relay lagging: send it this version

_DONE_FOR_RELAY = (RELAY_ACCEPTED, RELAY_REFUSED, RELAY_REPLACED)
T = TypeVar("T")  # what a transaction returns

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    event_id TEXT PRIMARY KEY,
    address TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    event_json TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    enqueued_at REAL NOT NULL,
    relays TEXT NOT NULL DEFAULT '{}',
    last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS outbox_address ON outbox(address);
CREATE TABLE IF NOT EXISTS remote_newest (
    address TEXT PRIMARY KEY,
    event_id TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    event: Event
    address: str
    state: str
    attempts: int
    next_attempt_at: float
    enqueued_at: float
    relays: dict[str, str]  # url -> "accepted" | "refused: …" | "replaced: …" | "retry: …" | "needed"
    last_error: str

    @property
    def accepted_by(self) -> list[str]:
        return [u for u, s in self.relays.items() if s == RELAY_ACCEPTED]

    def relay_done(self, url: str) -> bool:
        """The relay accepted this event or refused it for good."""
        return self.relays.get(url, "").startswith(_DONE_FOR_RELAY)

    def relays_to_retry(self, urls: Iterable[str]) -> list[str]:
        """Relays that have neither accepted nor refused this event for good."""
        if self.state == SUPERSEDED:
            return []
        return [u for u in urls if not self.relay_done(u)]

    def describe(self) -> str:
        """One line for status displays, e.g. ``pending (2 attempts; ws://a: retry: timeout)``."""
        extra = [f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"]
        if self.last_error:
            extra.append(self.last_error)
        return f"{self.state} ({'; '.join(extra)})"


def backoff_delay(attempts: int, *, base: float = 1.0, cap: float = 300.0, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter: uniform in [base/2, min(cap, base·2^attempts)]."""
    r = rng or random
    high = min(cap, base * (2 ** min(max(0, attempts), 60)))
    return r.uniform(min(base / 2, high), high)


def classify_verdict(verdict: Verdict, message: str) -> str:
    """The per-relay status string stored for one publish answer (see :func:`status_of`)."""
    return status_of(RelayVerdict("", verdict, message))


def status_of(verdict: RelayVerdict) -> str:
    """The per-relay status string stored for one publish answer: ``accepted``, ``refused: <reason>``,
    ``replaced: <reason>`` or ``retry: <verdict>[: <reason>]`` (decided by the verdict's typed prefix)."""
    if verdict.disposition is Disposition.HELD:
        return RELAY_ACCEPTED
    if verdict.disposition is Disposition.RETRY:
        return f"{RELAY_RETRY}: {verdict.verdict.value}{(': ' + verdict.message) if verdict.message else ''}"
    return f"{verdict.disposition.value}: {verdict.message}"


class Outbox:
    def __init__(
        self,
        db_path: Path,
        *,
        clock: Callable[[], float] = time.time,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
        busy_timeout: float = 2.0,
    ) -> None:
        self.db_path = db_path
        self._clock = clock
        self._base = base_delay
        self._cap = max_delay
        self._lock = threading.Lock()
        try:
            # 0600 whatever the data dir's mode or the umask (agent.private_files).
            self._db = open_private_wal(db_path, timeout=busy_timeout, check_same_thread=False,
                                        isolation_level=None)
            self._db.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise AgentError(
                f"cannot open the memory outbox {db_path}: {exc} (is another program holding it locked?)",
                "Outbox",
            ) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- writing --------------------------------------------------------------------------
    def _tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(self._db)
                except BaseException:
                    if self._db.in_transaction:  # SQLite may have rolled back already (e.g. disk full)
                        self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
                return out
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                if is_disk_full(exc):
                    raise AgentError(storage_error_message(exc, "the memory edit", self.db_path), "Outbox") from None
                raise AgentError(
                    f"the memory outbox {self.db_path} is not writable: {exc} "
                    "(is another program holding it locked?)",
                    "Outbox",
                ) from None

    @staticmethod
    def _remote_newer_than(db: sqlite3.Connection, addr: str, ev: Event) -> bool:
        row = db.execute("SELECT event_id, created_at FROM remote_newest WHERE address=?", (addr,)).fetchone()
        return row is not None and is_newer_version(int(row[1]), str(row[0]), ev.created_at, ev.id)

    def _insert(self, db: sqlite3.Connection, ev: Event, *, state_if_current: str, now: float) -> str:
        """Insert ``ev`` (superseding older live entries of its address); returns its state."""
        addr = address_key(ev)
        state = SUPERSEDED if self._remote_newer_than(db, addr, ev) else state_if_current
        for other_json, in db.execute(
            "SELECT event_json FROM outbox WHERE address=? AND state!=?", (addr, SUPERSEDED)
        ).fetchall():
            other = Event.from_json(other_json)
            if is_newer(other, ev):
                state = SUPERSEDED
            else:
                db.execute("UPDATE outbox SET state=? WHERE event_id=?", (SUPERSEDED, other.id))
        db.execute(
            "INSERT INTO outbox(event_id,address,created_at,event_json,state,enqueued_at,next_attempt_at)"
            " VALUES (?,?,?,?,?,?,?)",
            (ev.id, addr, ev.created_at, ev.to_json(), state, now, now),
        )
        return state

    def enqueue(self, ev: Event) -> str:
        """Store ``ev`` before sending. Returns its state: ``pending``, or ``superseded`` if a newer
        version of the same address is already known (then it must not be sent). Idempotent."""
        now = self._clock()

        def run(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT state FROM outbox WHERE event_id=?", (ev.id,)).fetchone()
            if row:
                return str(row[0])
            return self._insert(db, ev, state_if_current=PENDING, now=now)

        return str(self._tx(run))

    def record(self, outcome: PublishOutcome) -> OutboxEntry | None:
        """Fold one publish attempt's per-relay verdicts into the entry and schedule the next try."""
        now = self._clock()

        def run(db: sqlite3.Connection) -> None:
            row = db.execute(
                "SELECT relays, attempts, state FROM outbox WHERE event_id=?", (outcome.event_id,)
            ).fetchone()
            if row is None:
                return
            relays: dict[str, str] = json.loads(row[0])
            attempts = int(row[1]) + 1
            state = str(row[2])
            for url, verdict in outcome.results.items():
                status = status_of(verdict)
                if relays.get(url) == RELAY_ACCEPTED and not status.startswith(_DONE_FOR_RELAY):
                    # a relay that holds the event stays "accepted" even if a later retry timed out
                    continue
                relays[url] = status
            if state != SUPERSEDED:
                if any(s == RELAY_ACCEPTED for s in relays.values()):
                    state = DELIVERED
                elif relays and all(s.startswith(_DONE_FOR_RELAY) for s in relays.values()):
                    state = REFUSED
                else:
                    state = PENDING
            errors = [f"{u}: {s}" for u, s in sorted(relays.items()) if s != RELAY_ACCEPTED]
            delay = backoff_delay(attempts - 1, base=self._base, cap=self._cap)
            db.execute(
                "UPDATE outbox SET relays=?, attempts=?, state=?, next_attempt_at=?, last_error=? WHERE event_id=?",
                (json.dumps(relays, sort_keys=True), attempts, state, now + delay, "; ".join(errors), outcome.event_id),
            )

        self._tx(run)
        return self.get(outcome.event_id)

    def mark_superseded_by(self, ev: Event) -> list[str]:
        """A version seen elsewhere (a relay, another device): older local entries must not be sent.

        Remembers it as the newest remote version of its address when it is, so a local save older
        than it is superseded on arrival. Returns the ids of the entries it superseded.
        """
        addr = address_key(ev)

        def run(db: sqlite3.Connection) -> list[str]:
            if not self._remote_newer_than(db, addr, ev):
                db.execute(
                    "INSERT INTO remote_newest(address,event_id,created_at) VALUES (?,?,?)"
                    " ON CONFLICT(address) DO UPDATE SET event_id=excluded.event_id, created_at=excluded.created_at",
                    (addr, ev.id, ev.created_at),
                )
            gone: list[str] = []
            for other_json, in db.execute(
                "SELECT event_json FROM outbox WHERE address=? AND state!=?", (addr, SUPERSEDED)
            ).fetchall():
                other = Event.from_json(other_json)
                if is_newer(ev, other):
                    db.execute("UPDATE outbox SET state=? WHERE event_id=?", (SUPERSEDED, other.id))
                    gone.append(other.id)
            return gone

        return list(self._tx(run))

    def require(self, ev: Event, urls: Iterable[str]) -> str:
        """Make sure ``urls`` get ``ev`` (reconcile found them lagging): the entry is added when
        missing and those relays are marked as needing it, due now. Returns the entry's state."""
        wanted = list(urls)
        now = self._clock()

        def run(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT state, relays FROM outbox WHERE event_id=?", (ev.id,)).fetchone()
            if row is None:
                # Seen on a relay, so somewhere it is already delivered.
                state = self._insert(db, ev, state_if_current=DELIVERED, now=now)
                relays: dict[str, str] = {}
            else:
                state, relays = str(row[0]), json.loads(row[1])
            if state == SUPERSEDED:
                return state
            for url in wanted:
                relays[url] = RELAY_NEEDED
            if state == REFUSED:
                state = PENDING
            db.execute(
                "UPDATE outbox SET relays=?, state=?, next_attempt_at=? WHERE event_id=?",
                (json.dumps(relays, sort_keys=True), state, now, ev.id),
            )
            return state

        return str(self._tx(run))

    def prune(self, older_than: float = 7 * 24 * 3600) -> int:
        """Forget superseded entries enqueued more than ``older_than`` seconds ago (they are never
        sent again; memory history keeps every version). Returns how many were removed."""
        cutoff = self._clock() - older_than
        return int(
            self._tx(
                lambda db: db.execute(
                    "DELETE FROM outbox WHERE state=? AND enqueued_at<?", (SUPERSEDED, cutoff)
                ).rowcount
            )
        )

    def wake_all(self) -> None:
        """Make every unfinished entry due now (e.g. after a relay reconnects)."""
        self._tx(
            lambda db: db.execute("UPDATE outbox SET next_attempt_at=0 WHERE state NOT IN (?,?)", (SUPERSEDED, REFUSED))
        )

    # --- reading --------------------------------------------------------------------------
    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[OutboxEntry]:
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT event_json,address,state,attempts,next_attempt_at,enqueued_at,relays,last_error "
                    f"FROM outbox {sql}",
                    args,
                ).fetchall()
            except sqlite3.Error as exc:
                raise AgentError(f"cannot read the memory outbox {self.db_path}: {exc}", "Outbox") from None
        return [
            OutboxEntry(Event.from_json(r[0]), r[1], r[2], int(r[3]), float(r[4]), float(r[5]), json.loads(r[6]), r[7])
            for r in rows
        ]

    def get(self, event_id: str) -> OutboxEntry | None:
        rows = self._rows("WHERE event_id=?", (event_id,))
        return rows[0] if rows else None

    def entries(self, address: str | None = None) -> list[OutboxEntry]:
        """Every entry (of ``address``), oldest first — for status displays and tests."""
        if address is None:
            return self._rows("ORDER BY enqueued_at, created_at")
        return self._rows("WHERE address=? ORDER BY enqueued_at, created_at", (address,))

    def pending(self) -> list[OutboxEntry]:
        """Events no relay has accepted yet (what the UI shows as "publishes pending")."""
        return self._rows("WHERE state=? ORDER BY enqueued_at", (PENDING,))

    def unfinished(self, urls: Iterable[str]) -> list[OutboxEntry]:
        """Current (not superseded) entries that some relay in ``urls`` still needs."""
        wanted = list(urls)
        rows = self._rows("WHERE state!=? ORDER BY enqueued_at", (SUPERSEDED,))
        return [e for e in rows if e.relays_to_retry(wanted)]

    def due(self, urls: Iterable[str], now: float | None = None) -> list[OutboxEntry]:
        t = self._clock() if now is None else now
        return [e for e in self.unfinished(urls) if e.next_attempt_at <= t]

    def latest(self, address: str) -> OutboxEntry | None:
        """The current (not superseded) entry of ``address``."""
        rows = self._rows(
            f"WHERE address=? AND state!=? ORDER BY {sql_newest_first(id_column='event_id')} LIMIT 1",
            (address, SUPERSEDED),
        )
        return rows[0] if rows else None
