"""The agent's NIP-17 inbox: which direct messages reach the model, each exactly once.

:meth:`DmInbox.receive` opens a gift wrap and decides:

- ``unreadable``: the wrap failed a NIP-59/NIP-17 check (counted, never shown to the model);
- ``own_copy``: our own sent copy; when it answers a message, that message is marked answered (this is
  how a second instance with the same key learns an answer was already sent);
- ``stranger``: the sender is neither the admin nor on the allow-list (counted, nothing stored);
- ``duplicate``: this rumor id was already answered, or is being answered by this run (two relays, or
  two wraps of the same message);
- ``answer``: hand it to the model, then call :meth:`DmInbox.answered` once the reply is published.

The ledger (SQLite, 0600, in the data dir) persists the rumor ids, so a restart never answers twice; a
message claimed by a run that ended before answering (a crash) is offered again to the next run. It also
keeps which conversation session belongs to which counterpart. The ledger is synchronous and
thread-safe: the service calls it through ``asyncio.to_thread``, like the conversation store.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ..errors import AgentError
from ..nostr.event import Event
from ..nostr.keys import SecretKey, is_hex_pubkey
from ..nostr.nip17 import DirectMessage, make_message, open_message, wrap_message
from ..nostr.nip59 import UnwrapError
from .private_files import is_disk_full, open_private_wal

MAX_LEDGER_ROWS = 100_000  # oldest rumor ids are forgotten first; wraps older than that are not fetched
_SCHEMA = """
CREATE TABLE IF NOT EXISTS dm_seen (
    rumor_id TEXT PRIMARY KEY,
    sender TEXT NOT NULL,
    state TEXT NOT NULL,          -- 'pending' (claimed by run_id) or 'answered'
    run_id TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS dm_seen_by_age ON dm_seen(updated_at);
CREATE TABLE IF NOT EXISTS dm_rooms (
    counterpart TEXT PRIMARY KEY,
    session_id TEXT NOT NULL
);
"""


class Verdict(str, Enum):
    ANSWER = "answer"
    DUPLICATE = "duplicate"
    STRANGER = "stranger"
    OWN_COPY = "own_copy"
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    message: DirectMessage | None  # None only when unreadable
    reason: str  # one line for the log (never the message text)


@dataclass(frozen=True, slots=True)
class DmPolicy:
    """Who may talk to the agent: the admin and an explicit allow-list (hex pubkeys)."""

    admin: str | None = None
    allow: frozenset[str] = frozenset()

    @classmethod
    def of(cls, admin: str | None, allow: Iterable[str] = ()) -> DmPolicy:
        keys = [admin] if admin else []
        for pk in (*keys, *allow):
            if not is_hex_pubkey(pk):
                raise AgentError(f"{pk[:70]!r} is not a hex public key", "Direct messages")
        return cls(admin.lower() if admin else None, frozenset(pk.lower() for pk in allow))

    def accepts(self, pubkey: str) -> bool:
        return pubkey == self.admin or pubkey in self.allow


class DmLedger:
    """Persisted rumor ids (answered or claimed) and the session of each counterpart."""

    def __init__(self, db_path: str | Path, *, clock: Callable[[], float] = time.time,
                 max_rows: int = MAX_LEDGER_ROWS) -> None:
        self._clock, self.max_rows = clock, max_rows
        self._lock = threading.RLock()
        path = str(db_path)
        try:
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._db = open_private_wal(path, check_same_thread=False, timeout=5.0, isolation_level=None)
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            reason = "disk full" if is_disk_full(exc) else str(exc)
            raise AgentError(f"cannot open the DM ledger {path}: {reason}", "Direct messages") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def state(self, rumor_id: str) -> tuple[str, str] | None:
        """``(state, run_id)`` of a rumor id, or None if never seen."""
        with self._lock:
            row = self._db.execute("SELECT state, run_id FROM dm_seen WHERE rumor_id = ?", (rumor_id,)).fetchone()
        return (row[0], row[1]) if row else None

    def claim(self, rumor_id: str, sender: str, run_id: str) -> bool:
        """True when this run may answer: never seen, or left pending by a run that ended."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT state, run_id FROM dm_seen WHERE rumor_id = ?",
                                       (rumor_id,)).fetchone()
                ok = row is None or (row[0] == "pending" and row[1] != run_id)
                if ok:
                    self._db.execute("INSERT OR REPLACE INTO dm_seen VALUES (?, ?, 'pending', ?, ?)",
                                     (rumor_id, sender, run_id, self._clock()))
                self._db.execute("COMMIT")
            except sqlite3.Error:
                self._db.execute("ROLLBACK")
                raise
        if ok:
            self.prune()
        return ok

    def mark_answered(self, rumor_id: str, sender: str = "", run_id: str = "") -> None:
        with self._lock:
            self._db.execute("INSERT INTO dm_seen VALUES (?, ?, 'answered', ?, ?) ON CONFLICT(rumor_id) DO UPDATE "
                             "SET state = 'answered', updated_at = excluded.updated_at",
                             (rumor_id, sender, run_id, self._clock()))

    def release(self, rumor_id: str, run_id: str) -> None:
        """Give up a claim (the answer failed): a later delivery of the message may be answered."""
        with self._lock:
            self._db.execute("DELETE FROM dm_seen WHERE rumor_id = ? AND state = 'pending' AND run_id = ?",
                             (rumor_id, run_id))

    def prune(self) -> int:
        """Forget the oldest rumor ids beyond ``max_rows``; returns how many."""
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM dm_seen").fetchone()
            extra = count - self.max_rows
            if extra <= 0:
                return 0
            self._db.execute("DELETE FROM dm_seen WHERE rumor_id IN "
                             "(SELECT rumor_id FROM dm_seen ORDER BY updated_at, rumor_id LIMIT ?)", (extra,))
            return extra

    def session_for(self, counterpart: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT session_id FROM dm_rooms WHERE counterpart = ?", (counterpart,)).fetchone()
        return row[0] if row else None

    def bind_session(self, counterpart: str, session_id: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO dm_rooms VALUES (?, ?)", (counterpart, session_id))


class DmInbox:
    """Decides what to do with each incoming gift wrap; builds the replies."""

    def __init__(self, key: SecretKey, policy: DmPolicy, ledger: DmLedger, *, run_id: str | None = None) -> None:
        self.key, self.policy, self.ledger = key, policy, ledger
        self.run_id = run_id or uuid.uuid4().hex
        self.counts: Counter[str] = Counter()  # verdicts seen, for the status line and logs

    def receive(self, wrapped: Event) -> Decision:
        decision = self._decide(wrapped)
        self.counts[decision.verdict.value] += 1
        return decision

    def _decide(self, wrapped: Event) -> Decision:
        try:
            dm = open_message(wrapped, self.key)
        except UnwrapError as exc:
            return Decision(Verdict.UNREADABLE, None, f"wrap {wrapped.id[:12]}…: {exc.message}")
        me = self.key.public_key_hex
        if dm.sender == me:
            if dm.reply_to:
                self.ledger.mark_answered(dm.reply_to, run_id="own-copy")
            return Decision(Verdict.OWN_COPY, dm, f"our own message {dm.id[:12]}…")
        if not self.policy.accepts(dm.sender):
            return Decision(Verdict.STRANGER, dm, f"message {dm.id[:12]}… from {dm.sender[:12]}…, not allowed")
        if not self.ledger.claim(dm.id, dm.sender, self.run_id):
            return Decision(Verdict.DUPLICATE, dm, f"message {dm.id[:12]}… already answered or in progress")
        return Decision(Verdict.ANSWER, dm, f"message {dm.id[:12]}… from {dm.sender[:12]}…")

    def reply(self, dm: DirectMessage, text: str, *, now: int,
              rng: random.Random | None = None) -> dict[str, Event]:
        """Gift wraps of the answer (to the sender and a copy to ourselves), keyed by recipient."""
        rumor = make_message(self.key.public_key_hex, [dm.sender], text, created_at=now, reply_to=dm.id)
        return wrap_message(rumor, self.key, now=now, rng=rng, copy_to_self=True)

    def answered(self, dm: DirectMessage) -> None:
        self.ledger.mark_answered(dm.id, dm.sender, self.run_id)

    def failed(self, dm: DirectMessage) -> None:
        """The answer could not be sent: let a later delivery try again."""
        self.ledger.release(dm.id, self.run_id)
