"""Conversations on SQLite (WAL) in the data dir: sessions, their messages (OpenAI format) and tool calls.

The store is synchronous and thread-safe (one connection behind a lock); the service calls it through
``asyncio.to_thread``. ``history_for_prompt`` picks the newest whole turns that fit a token budget and never
separates an assistant message carrying tool calls from the tool results that answer it — providers refuse
such a history.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ...errors import AgentError
from ..llm import tokens
from ..private_files import is_disk_full, open_private_wal
from .db import Transaction, add_agent_column, add_later_columns, adopt_attach_bindings, bounded_call, row_to_message
from .session_info import SessionInfo, ToolCallRecord
from .turns import repair_tool_pairs

ROLES = frozenset({"system", "user", "assistant", "tool"})
_MESSAGE_COLUMNS = "role, content, content_is_json, tool_calls, tool_call_id, name, status, ending"
# Tool-call arguments longer than this are stored as a placeholder (above [llm] max_tool_argument_chars's cap).
MAX_STORED_ARGUMENT_CHARS = 1_000_000
HISTORY_PAGE_ROWS = 64  # rows read per step when history_for_prompt walks back from the newest message
TITLE_CHARS = 60
MAX_ENDING_CHARS = 16  # a tool result's ending is one word (agent/turn/events.py TOOL_ENDINGS)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT,
    content_is_json INTEGER NOT NULL DEFAULT 0,  -- content was a list of parts, stored as JSON
    tool_calls TEXT,  -- JSON list (assistant messages that call tools)
    tool_call_id TEXT,
    name TEXT,
    created_at REAL NOT NULL,
    status TEXT,  -- NULL: part of the chat; else why not (a failed or cancelled turn's message, kept to show)
    ending TEXT,  -- a tool result: how its call ended (done, error, refused, cancelled); NULL: not known
    UNIQUE (session_id, ordinal)
);
CREATE TABLE IF NOT EXISTS tool_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    arguments TEXT NOT NULL,
    result TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session_id, ordinal);
CREATE INDEX IF NOT EXISTS tool_calls_by_session ON tool_calls(session_id, call_id);
CREATE INDEX IF NOT EXISTS sessions_by_update ON sessions(updated_at);
"""


def _title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def _check_message(message: Mapping[str, Any]) -> None:
    role = message.get("role")
    if role not in ROLES:
        raise AgentError(f"cannot store a message with role {role!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise AgentError(f"cannot store a {role} message whose content is {type(content).__name__}")
    if role == "tool" and not message.get("tool_call_id"):
        raise AgentError("cannot store a tool message without its tool_call_id")


class ConversationStore:
    """Sessions and messages in one SQLite file (created on first use, WAL journal). A session knows the agent it is
    with: this data dir's own (``agent`` NULL), or one that runs elsewhere (``didactyl attach``: its key)."""

    def __init__(self, db_path: str | Path, *, clock: Callable[[], float] = time.time,
                 max_argument_chars: int = MAX_STORED_ARGUMENT_CHARS, attach_bindings: Path | None = None) -> None:
        """``attach_bindings``: the data dir's ``attach.sqlite3``, whose conversations are marked with their agent
        when this database is one made before sessions knew it."""
        self.db_path = Path(db_path)
        self._attach_bindings = attach_bindings
        self._path_text = str(db_path)
        self._clock = clock
        self.max_argument_chars = max_argument_chars
        self._lock = threading.RLock()
        # Opened on first use: a command that never touches a conversation (e.g. a memory save to an
        # external relay) works even when this file cannot be opened (disk full, read-only data dir).
        self._db: sqlite3.Connection | None = None

    def open(self) -> None:
        """Open the database now (otherwise the first use does); raises AgentError when it cannot."""
        self._conn()

    def _conn(self) -> sqlite3.Connection:
        with self._lock:
            if self._db is None:
                self._db = self._connect()
            return self._db

    def _connect(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = None
        try:
            # 0600 whatever the data dir's mode or the umask: the file holds every chat in plaintext.
            db = open_private_wal(self._path_text, check_same_thread=False, timeout=5.0, isolation_level=None)
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            add_later_columns(db)
            if add_agent_column(db) and self._attach_bindings is not None:
                adopt_attach_bindings(db, self._attach_bindings)
        except (sqlite3.Error, OSError) as exc:
            if db is not None:
                db.close()
            reason = "disk full" if is_disk_full(exc) else str(exc)
            raise AgentError(f"cannot open the conversation database {self.db_path}: {reason}",
                             "Conversations") from None
        db.row_factory = sqlite3.Row
        return db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def transaction(self) -> Transaction:
        """``with store.transaction() as db:``: the one writer, in one transaction."""
        return Transaction(self._lock, self._conn, self.db_path)

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """``with store.reading() as db:``: the connection, under the lock (reads only)."""
        with self._lock:
            yield self._conn()

    # --- sessions ---------------------------------------------------------------------------------

    def new_session(self, title: str = "", *, agent: str | None = None) -> str:
        """A new conversation; ``agent``: the agent elsewhere it is with (hex), None for this data dir's own."""
        session_id = uuid.uuid4().hex
        now = self._clock()
        with self.transaction() as db:
            db.execute("INSERT INTO sessions (id, title, created_at, updated_at, agent) VALUES (?, ?, ?, ?, ?)",
                       (session_id, _title_from(title) if title else "", now, now, agent))
        return session_id

    def session_agent(self, session_id: str) -> str | None:
        """The agent elsewhere a conversation is with (None: this data dir's own, or no such conversation)."""
        with self._lock:
            row = self._conn().execute("SELECT agent FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else row["agent"]

    def set_session_agent(self, session_id: str, agent: str | None) -> None:
        with self.transaction() as db:
            db.execute("UPDATE sessions SET agent = ? WHERE id = ?", (agent, session_id))

    def session_with_agent(self, agent: str) -> str | None:
        """The (newest) conversation with the agent elsewhere ``agent``."""
        with self._lock:
            row = self._conn().execute("SELECT id FROM sessions WHERE agent = ? ORDER BY updated_at DESC LIMIT 1",
                                       (agent,)).fetchone()
        return None if row is None else str(row["id"])

    def has_session(self, session_id: str) -> bool:
        with self._lock:
            row = self._conn().execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return row is not None

    def list_sessions(self) -> list[SessionInfo]:
        """Newest activity first."""
        with self._lock:
            rows = self._conn().execute(
                "SELECT s.id, s.title, s.created_at, s.updated_at, s.agent, "
                "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS n "
                "FROM sessions s ORDER BY s.updated_at DESC, s.rowid DESC"
            ).fetchall()
        return [SessionInfo(r["id"], r["title"], r["created_at"], r["updated_at"], r["n"], r["agent"]) for r in rows]

    def session(self, session_id: str) -> SessionInfo:
        for info in self.list_sessions():
            if info.id == session_id:
                return info
        raise AgentError(f"no conversation {session_id!r}", "Conversations")

    def rename_session(self, session_id: str, title: str) -> None:
        with self.transaction() as db:
            cur = db.execute("UPDATE sessions SET title = ? WHERE id = ?", (_title_from(title), session_id))
            if cur.rowcount == 0:
                raise AgentError(f"no conversation {session_id!r}", "Conversations")

    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its messages and tool calls; False if there was none."""
        with self.transaction() as db:
            cur = db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        return cur.rowcount > 0

    def restore_session(self, session_id: str, title: str, created_at: float, updated_at: float,
                        messages: Iterable[Mapping[str, Any]], *, agent: str | None = None) -> None:
        """Recreate an exported session as it was (id, title, times, messages, agent); an id in use is refused."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None:
                raise AgentError(f"conversation {session_id!r} already exists", "Conversations")
            db.execute("INSERT INTO sessions (id, title, created_at, updated_at, agent) VALUES (?, ?, ?, ?, ?)",
                       (session_id, title, created_at, updated_at, agent))
        try:
            self.append(session_id, messages)
        except Exception:  # a bad message or a database error: no half session is left behind
            self.delete_session(session_id)
            raise
        with self.transaction() as db:  # append stamped "now" and may have set a title
            db.execute("UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?", (title, updated_at, session_id))

    # --- messages ---------------------------------------------------------------------------------

    def append(self, session_id: str, messages: Iterable[Mapping[str, Any]]) -> range:
        """Append OpenAI-format messages in one transaction (all or nothing); returns the positions they took (its
        length: how many; a view that read the chat up to a position knows whether a message is in what it read).

        A message may carry a ``status`` (e.g. "failed: …", "cancelled"): it is kept and shown, never sent to
        the model again (``history_for_prompt`` leaves it out); a tool result its call's ``ending`` (shown, never
        sent)."""
        batch = [dict(m) for m in messages]
        for message in batch:
            _check_message(message)
        if not batch:
            return range(0)
        now = self._clock()
        with self.transaction() as db:
            row = db.execute("SELECT title FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:
                raise AgentError(f"no conversation {session_id!r}", "Conversations")
            title = row["title"]
            (last,) = db.execute("SELECT COALESCE(MAX(ordinal), -1) FROM messages WHERE session_id = ?",
                                 (session_id,)).fetchone()
            for n, message in enumerate(batch, start=last + 1):
                content = message.get("content")
                is_json = isinstance(content, list)
                if is_json:
                    content = json.dumps(content, ensure_ascii=False)
                calls = [bounded_call(c, self.max_argument_chars) for c in message.get("tool_calls") or ()] or None
                cur = db.execute(
                    "INSERT INTO messages (session_id, ordinal, role, content, content_is_json, tool_calls, "
                    "tool_call_id, name, created_at, status, ending) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (session_id, n, message["role"], content, int(is_json),
                     json.dumps(calls, ensure_ascii=False) if calls else None,
                     message.get("tool_call_id"), message.get("name"), now, message.get("status") or None,
                     str(message.get("ending") or "")[:MAX_ENDING_CHARS] or None),
                )
                for call in calls or ():
                    fn = call.get("function", {})
                    args = fn.get("arguments", "")
                    db.execute(
                        "INSERT INTO tool_calls (session_id, message_id, call_id, name, arguments, created_at) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (session_id, cur.lastrowid, call.get("id", ""), fn.get("name", ""),
                         args if isinstance(args, str) else json.dumps(args), now),
                    )
                if message["role"] == "tool":
                    db.execute("UPDATE tool_calls SET result = ? WHERE session_id = ? AND call_id = ?",
                               (message.get("content"), session_id, message["tool_call_id"]))
                if not title and message["role"] == "user" and isinstance(message.get("content"), str):
                    title = _title_from(message["content"])
                    db.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))
            db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))
        return range(last + 1, last + 1 + len(batch))

    def messages(self, session_id: str, before: int | None = None) -> list[dict[str, Any]]:
        """The whole conversation in OpenAI format, oldest first (``before``: only the messages before that
        position, one :meth:`messages_tail` gave)."""
        with self._lock:
            rows = self._conn().execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND ordinal < ? ORDER BY ordinal",
                (session_id, 2**62 if before is None else before)).fetchall()
        return [row_to_message(r, with_status=True) for r in rows]

    def messages_tail(self, session_id: str, limit: int) -> tuple[int, int, int, list[dict[str, Any]]]:
        """The last messages, at most ``limit``, from a message of the user's on (no tool result parted from its
        call); how many come before them, the position they start at (for :meth:`messages` ``before``) and the
        position after the last (a message appended later is at or after it). All of a chat with no message of the
        user's in its last ``limit``."""
        with self._lock:
            db = self._conn()
            rows = db.execute(f"SELECT ordinal, {_MESSAGE_COLUMNS} FROM messages WHERE session_id = ? "
                              "ORDER BY ordinal DESC LIMIT ?", (session_id, limit)).fetchall()[::-1]
            until = rows[-1]["ordinal"] + 1 if rows else 0
            start = next((n for n, r in enumerate(rows) if r["role"] == "user"), None)
            if start is None or not rows:
                return 0, 0, until, self.messages(session_id, until)
            rows = rows[start:]
            (earlier,) = db.execute("SELECT COUNT(*) FROM messages WHERE session_id = ? AND ordinal < ?",
                                    (session_id, rows[0]["ordinal"])).fetchone()
        return earlier, rows[0]["ordinal"], until, [row_to_message(r, with_status=True) for r in rows]

    def pop_last_turn(self, session_id: str) -> str | None:
        """Delete the last turn (the newest user message and everything after it); returns that message's
        text, or None when the chat has no user message. For "regenerate" and "edit and resend"."""
        with self.transaction() as db:
            row = db.execute("SELECT ordinal, content, content_is_json FROM messages WHERE session_id = ? AND "
                             "role = 'user' ORDER BY ordinal DESC LIMIT 1", (session_id,)).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM messages WHERE session_id = ? AND ordinal >= ?", (session_id, row["ordinal"]))
            db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (self._clock(), session_id))
        content = row["content"]
        return json.dumps(json.loads(content), ensure_ascii=False) if row["content_is_json"] else (content or "")

    def tool_calls(self, session_id: str) -> list[ToolCallRecord]:
        with self._lock:
            rows = self._conn().execute(
                "SELECT call_id, name, arguments, result, created_at FROM tool_calls WHERE session_id = ? "
                "ORDER BY id", (session_id,)
            ).fetchall()
        return [ToolCallRecord(r["call_id"], r["name"], r["arguments"], r["result"], r["created_at"]) for r in rows]

    def history_for_prompt(self, session_id: str, model: str, token_budget: int,
                           *, max_turns: int | None = None) -> tuple[list[dict[str, Any]], int]:
        """The newest whole turns whose tokens fit ``token_budget``; returns (messages, dropped_count).

        A turn is a user message and everything after it up to the next user message, so an assistant's
        tool calls always travel with their results. Turns are taken newest first and the first one that
        does not fit ends the selection (older turns are not skipped over: the history stays contiguous).

        Only the window is read: rows come newest first from the (session_id, ordinal) index, a page at a
        time, so the cost follows what the prompt keeps, not how long the conversation has grown.
        ``dropped_count`` is the number of stored messages left out.
        """
        kept: list[list[dict[str, Any]]] = []
        used = 0
        pending: list[dict[str, Any]] = []  # the turn being collected, newest message first
        total = 0  # ordinals run 0..n-1 in a session (appends only), so the newest one gives the count
        before: int | None = None
        full = False
        skipped = 0
        while not full:
            rows = self._history_page(session_id, before)
            if not rows:
                break
            if before is None:
                total = rows[0]["ordinal"] + 1
            before = rows[-1]["ordinal"]
            for row in rows:
                if row["status"] is not None:  # a failed or cancelled turn's message: shown, never sent again
                    skipped += 1
                    continue
                message = row_to_message(row)
                pending.append(message)
                if message["role"] != "user":
                    continue
                turn = repair_tool_pairs(pending[::-1])
                pending = []
                if max_turns is not None and len(kept) >= max_turns:
                    full = True
                    break
                cost = sum(tokens.PER_MESSAGE_OVERHEAD + tokens.count_tokens(model, tokens.message_text(m))
                           for m in turn)
                if used + cost > token_budget:
                    full = True
                    break
                kept.append(turn)
                used += cost
        # Messages older than the oldest user message (e.g. an old system note) never open a history.
        kept.reverse()
        chosen = [m for turn in kept for m in turn]
        return chosen, max(0, total - len(chosen) - skipped)

    def _history_page(self, session_id: str, before: int | None) -> list[sqlite3.Row]:
        columns = "ordinal, role, content, content_is_json, tool_calls, tool_call_id, name, status"
        with self._lock:
            if before is None:
                return self._conn().execute(
                    f"SELECT {columns} FROM messages WHERE session_id = ? ORDER BY ordinal DESC LIMIT ?",
                    (session_id, HISTORY_PAGE_ROWS)).fetchall()
            return self._conn().execute(
                f"SELECT {columns} FROM messages WHERE session_id = ? AND ordinal < ? ORDER BY ordinal DESC "
                "LIMIT ?", (session_id, before, HISTORY_PAGE_ROWS)).fetchall()

    # --- export -----------------------------------------------------------------------------------

    def export_markdown(self, session_id: str) -> str:
        from .markdown import render_markdown  # an export's alone: the turn records it reads are not a read's

        return render_markdown(self.session(session_id), self.messages(session_id))
