"""Messages the admin wrote to an agent elsewhere (``attach``) that no relay it reads has taken yet: kept on disk with
their signed gift wraps until one does. Each is delivered as it was written — the same wrap, so the same message
(rumor id): sent again any number of times, it reaches the agent, and is answered, once. SQLite, 0600, bounded."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from ...errors import AgentError
from ...nostr.event import Event
from ..private_files import connect_private, tighten_sqlite_files

MAX_WAITING = 64


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to the agent, signed and wrapped: its rumor id is what the agent's reply names."""

    rumor_id: str
    created_at: int
    text: str
    wrap: Event  # to the agent
    own_copy: Event | None = None  # to the admin (other devices see the conversation)


@dataclass(frozen=True, slots=True)
class Waiting:
    message: Outgoing
    session_id: str
    tries: int
    reason: str  # the relays' answers at the last try


class Undelivered:
    def __init__(self, path: Path | str, *, max_waiting: int = MAX_WAITING) -> None:
        self._db = connect_private(path, check_same_thread=False)
        self._lock = threading.Lock()
        self.max_waiting = max_waiting
        with self._lock, self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS waiting (rumor_id TEXT PRIMARY KEY, agent TEXT NOT NULL, "
                             "session_id TEXT NOT NULL, text TEXT NOT NULL, created_at INTEGER NOT NULL, "
                             "wrap TEXT NOT NULL, own_copy TEXT, tries INTEGER NOT NULL DEFAULT 0, "
                             "reason TEXT NOT NULL DEFAULT '')")
        tighten_sqlite_files(path)

    def add(self, agent: str, session_id: str, message: Outgoing) -> None:
        """Keep ``message`` until it is delivered; AgentError when ``max_waiting`` already wait (nothing is kept)."""
        with self._lock, self._db:
            (count,) = self._db.execute("SELECT COUNT(*) FROM waiting").fetchone()
            if count >= self.max_waiting:
                raise AgentError(f"not sent: {count} messages already wait for a relay of the agent's to take them "
                                 "([attach] max_undelivered); they go first, once one does", "Not sent")
            self._db.execute("INSERT OR IGNORE INTO waiting (rumor_id, agent, session_id, text, created_at, wrap, "
                             "own_copy) VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (message.rumor_id, agent, session_id, message.text, message.created_at,
                              message.wrap.to_json(),
                              message.own_copy.to_json() if message.own_copy is not None else None))

    def find(self, agent: str, session_id: str, text: str) -> Waiting | None:
        """The waiting message with these words (sending them again is a retry: the same message, not another)."""
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM waiting WHERE agent = ? AND session_id = ? AND text = ? "
                                   "ORDER BY created_at LIMIT 1", (agent, session_id, text)).fetchone()
        return _waiting(row) if row is not None else None

    def waiting(self, agent: str) -> list[Waiting]:
        """Every message waiting for ``agent``, oldest first."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM waiting WHERE agent = ? ORDER BY created_at, rumor_id",
                                    (agent,)).fetchall()
        return [_waiting(row) for row in rows]

    def tried(self, rumor_id: str, reason: str) -> None:
        with self._lock, self._db:
            self._db.execute("UPDATE waiting SET tries = tries + 1, reason = ? WHERE rumor_id = ?",
                             (reason[:1000], rumor_id))

    def delivered(self, rumor_id: str) -> bool:
        """Forget it (a relay of the agent's took it); whether it was still waiting."""
        with self._lock, self._db:
            return bool(self._db.execute("DELETE FROM waiting WHERE rumor_id = ?", (rumor_id,)).rowcount)

    def close(self) -> None:
        with self._lock:
            self._db.close()


_COLUMNS = "rumor_id, session_id, text, created_at, wrap, own_copy, tries, reason"


def _waiting(row: tuple[str, str, str, int, str, str | None, int, str]) -> Waiting:
    rumor_id, session_id, text, created_at, wrap, own_copy, tries, reason = row
    message = Outgoing(rumor_id, int(created_at), text, Event.from_json(wrap),
                       Event.from_json(own_copy) if own_copy else None)
    return Waiting(message, session_id, int(tries), reason)
