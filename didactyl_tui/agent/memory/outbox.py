"""The memory outbox: every memory publish is written to SQLite before it is sent.

An event stays here until relays have accepted it; until then it is retried with backoff, across
reconnects and restarts. A newer version of the same address supersedes a pending older one, so stale
content is never published after newer content. Per relay we remember who accepted it and who refused
it for good (``invalid:``/``blocked:``-style rejections are final for that relay; timeouts and
``not connected`` are retried).

Synchronous SQLite (each call is a few small statements); the service runs it through
``asyncio.to_thread`` when it matters.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ...errors import AgentError
from ...nostr.event import Event
from ...nostr.replaceable import address_of, is_newer
from ...nostr.results import PublishOutcome, Verdict

PENDING = "pending"  # not accepted by any relay yet
DELIVERED = "delivered"  # accepted by at least one relay (others may still be retried)
SUPERSEDED = "superseded"  # a newer version of the same address exists: never sent again

# Relay answers that will not change on retry.
_FINAL_PREFIXES = ("invalid:", "blocked:", "pow:", "restricted:", "duplicate:")

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
"""


def address_key(ev: Event) -> str:
    addr = address_of(ev)
    if addr is None:
        return f"event:{ev.id}"
    kind, pubkey, d = addr
    return f"{kind}:{pubkey}:{d}"


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    event: Event
    address: str
    state: str
    attempts: int
    next_attempt_at: float
    enqueued_at: float
    relays: dict[str, str]  # url -> "accepted" | "refused: <reason>" | "retry: <reason>"
    last_error: str

    @property
    def accepted_by(self) -> list[str]:
        return [u for u, s in self.relays.items() if s == "accepted"]

    def relays_to_retry(self, urls: Iterable[str]) -> list[str]:
        """Relays that have neither accepted nor refused this event for good."""
        return [u for u in urls if not (self.relays.get(u, "").startswith(("accepted", "refused")))]


def backoff_delay(attempts: int, *, base: float = 1.0, cap: float = 300.0, rng: random.Random | None = None) -> float:
    """Exponential backoff with full jitter: uniform in [base/2, min(cap, base·2^attempts)]."""
    r = rng or random
    high = min(cap, base * (2 ** max(0, attempts)))
    return r.uniform(min(base / 2, high), high)


class Outbox:
    def __init__(
        self,
        db_path: Path,
        *,
        clock: Callable[[], float] = time.time,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
    ) -> None:
        self.db_path = db_path
        self._clock = clock
        self._base = base_delay
        self._cap = max_delay
        self._lock = threading.Lock()
        db_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(db_path, timeout=5.0, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA)
        except sqlite3.OperationalError as exc:
            raise AgentError(
                f"cannot open the memory outbox {db_path}: {exc} (is another program holding it locked?)",
                "Outbox",
            ) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- writing --------------------------------------------------------------------------
    def _tx(self, fn: Callable[[sqlite3.Connection], object]) -> object:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(self._db)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
                return out
            except sqlite3.OperationalError as exc:
                raise AgentError(
                    f"the memory outbox {self.db_path} is not writable: {exc} "
                    "(is another program holding it locked?)",
                    "Outbox",
                ) from None

    def enqueue(self, ev: Event) -> str:
        """Store ``ev`` before sending. Returns its state: ``pending``, or ``superseded`` if a newer
        version of the same address is already known (then it must not be sent)."""
        addr = address_key(ev)
        now = self._clock()

        def run(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT state FROM outbox WHERE event_id=?", (ev.id,)).fetchone()
            if row:
                return str(row[0])
            others = db.execute(
                "SELECT event_json, state FROM outbox WHERE address=? AND state!=?", (addr, SUPERSEDED)
            ).fetchall()
            state = PENDING
            for other_json, _other_state in others:
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
            errors: list[str] = []
            for url, verdict in outcome.results.items():
                msg = verdict.message or ""
                if verdict.verdict is Verdict.ACCEPTED:
                    relays[url] = "accepted"
                elif verdict.verdict is Verdict.REJECTED and msg.lower().startswith(_FINAL_PREFIXES):
                    # "duplicate:" means the relay already holds exactly this event.
                    relays[url] = "accepted" if msg.lower().startswith("duplicate:") else f"refused: {msg}"
                else:
                    relays[url] = f"retry: {verdict.verdict.value}{(': ' + msg) if msg else ''}"
                    errors.append(f"{url}: {relays[url][7:]}")
            if state == PENDING and any(s == "accepted" for s in relays.values()):
                state = DELIVERED
            delay = backoff_delay(attempts - 1, base=self._base, cap=self._cap)
            db.execute(
                "UPDATE outbox SET relays=?, attempts=?, state=?, next_attempt_at=?, last_error=? WHERE event_id=?",
                (json.dumps(relays, sort_keys=True), attempts, state, now + delay, "; ".join(errors), outcome.event_id),
            )

        self._tx(run)
        return self.get(outcome.event_id)

    def mark_superseded_by(self, ev: Event) -> None:
        """A newer version arrived from elsewhere (another device): older local ones must not be sent."""
        addr = address_key(ev)

        def run(db: sqlite3.Connection) -> None:
            for other_json, in db.execute(
                "SELECT event_json FROM outbox WHERE address=? AND state!=?", (addr, SUPERSEDED)
            ).fetchall():
                other = Event.from_json(other_json)
                if is_newer(ev, other):
                    db.execute("UPDATE outbox SET state=? WHERE event_id=?", (SUPERSEDED, other.id))

        self._tx(run)

    def wake_all(self) -> None:
        """Make every unfinished entry due now (e.g. after a relay reconnects)."""
        self._tx(lambda db: db.execute("UPDATE outbox SET next_attempt_at=0 WHERE state!=?", (SUPERSEDED,)))

    # --- reading --------------------------------------------------------------------------
    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[OutboxEntry]:
        with self._lock:
            rows = self._db.execute(
                "SELECT event_json,address,state,attempts,next_attempt_at,enqueued_at,relays,last_error "
                f"FROM outbox {sql}",
                args,
            ).fetchall()
        return [
            OutboxEntry(Event.from_json(r[0]), r[1], r[2], int(r[3]), float(r[4]), float(r[5]), json.loads(r[6]), r[7])
            for r in rows
        ]

    def get(self, event_id: str) -> OutboxEntry | None:
        rows = self._rows("WHERE event_id=?", (event_id,))
        return rows[0] if rows else None

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

    def next_due_at(self, urls: Iterable[str]) -> float | None:
        times = [e.next_attempt_at for e in self.unfinished(urls)]
        return min(times) if times else None

    def latest(self, address: str) -> OutboxEntry | None:
        rows = self._rows("WHERE address=? AND state!=? ORDER BY created_at DESC, event_id ASC LIMIT 1",
                          (address, SUPERSEDED))
        return rows[0] if rows else None
