"""The conversation database's plumbing: the transaction helper, the schema's one migration, and how a
message row is stored and read back. Used by ``conversations`` (the store) and ``assembly_log``."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...errors import AgentError
from ..llm.limits import omitted_arguments
from ..private_files import is_disk_full, storage_error_message


class Transaction:
    """``with store.transaction() as db:`` — the lock plus BEGIN IMMEDIATE / COMMIT / ROLLBACK."""

    def __init__(self, lock: threading.RLock, connect: Callable[[], sqlite3.Connection], db_path: Path) -> None:
        self._lock, self._connect, self._db_path = lock, connect, db_path
        self.db: sqlite3.Connection

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        try:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._lock.release()
            if is_disk_full(exc):
                raise AgentError(storage_error_message(exc, "the conversation", self._db_path),
                                 "Conversations") from None
            raise AgentError(f"the conversation database is busy or locked: {exc}", "Conversations") from None
        except BaseException:
            self._lock.release()
            raise
        self.db = db
        return db

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        db = self.db
        try:
            if exc is None:
                try:
                    db.execute("COMMIT")
                    return
                except sqlite3.Error as commit_exc:
                    exc = commit_exc
            if db.in_transaction:
                # SQLite may have rolled back already (e.g. disk full): a failing ROLLBACK must not hide why.
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
        finally:
            self._lock.release()
        if isinstance(exc, sqlite3.Error):
            raise AgentError(storage_error_message(exc, "the conversation", self._db_path),
                             "Conversations") from None


def add_later_columns(db: sqlite3.Connection) -> None:
    """Databases made before messages had a status, or tool results an ending, get the columns (NULL: every old
    message is a sent one; an old tool result's ending is not known)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
    for column in ("status", "ending"):
        if column not in columns:
            db.execute(f"ALTER TABLE messages ADD COLUMN {column} TEXT")


def add_agent_column(db: sqlite3.Connection) -> bool:
    """Databases made before sessions knew their agent get the column (NULL: this data dir's own agent); whether it
    was added now."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(sessions)")}
    if "agent" in columns:
        return False
    db.execute("ALTER TABLE sessions ADD COLUMN agent TEXT")
    return True


def adopt_attach_bindings(db: sqlite3.Connection, attach_db: Path) -> int:
    """Mark the conversations ``attach`` kept before sessions knew their agent: ``attach.sqlite3`` bound each agent
    (``agent:<hex>``) to its session. Read only; a file that cannot be read marks nothing. How many were marked."""
    if not attach_db.exists():
        return 0
    try:
        source = sqlite3.connect(f"file:{attach_db}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return 0
    try:
        rows = source.execute("SELECT name, session_id FROM sessions WHERE name LIKE 'agent:%' LIMIT 10000").fetchall()
    except sqlite3.Error:
        return 0
    finally:
        source.close()
    marked = 0
    for name, session_id in rows:
        agent = str(name)[len("agent:"):].lower()
        if len(agent) == 64 and all(c in "0123456789abcdef" for c in agent):
            marked += db.execute("UPDATE sessions SET agent = ? WHERE id = ? AND agent IS NULL",
                                 (agent, str(session_id))).rowcount
    return marked


def bounded_call(call: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    """A tool call as stored: arguments over ``max_chars`` become a short placeholder (the loop refuses such a
    call before it runs; this keeps any other caller from storing megabytes either)."""
    out = dict(call)
    fn = dict(out.get("function") or {})
    args = fn.get("arguments", "")
    text = args if isinstance(args, str) else json.dumps(args)
    if len(text) > max_chars:
        fn["arguments"] = omitted_arguments(len(text))
        out["function"] = fn
    return out


def row_to_message(row: sqlite3.Row, *, with_status: bool = False) -> dict[str, Any]:
    """A stored message in OpenAI format; ``with_status`` adds what is for showing it, never for the model: a
    failed or cancelled turn's ``status`` and a tool result's ``ending`` (done, error, refused, cancelled)."""
    message: dict[str, Any] = {"role": row["role"]}
    content: Any = row["content"]
    if row["content_is_json"] and content is not None:
        content = json.loads(content)
    message["content"] = content
    if row["tool_calls"]:
        message["tool_calls"] = json.loads(row["tool_calls"])
    if row["tool_call_id"]:
        message["tool_call_id"] = row["tool_call_id"]
    if row["name"]:
        message["name"] = row["name"]
    if with_status and row["status"]:
        message["status"] = row["status"]
    if with_status and row["ending"]:
        message["ending"] = row["ending"]
    return message
