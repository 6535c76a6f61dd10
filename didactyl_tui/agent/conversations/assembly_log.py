"""The prompt assemblies of a chat's turns, kept beside its messages so a resumed chat's inspector has them.

Compact (JSON, zlib-compressed) and bounded: the newest ``keep`` per session, none larger than
``MAX_RECORD_BYTES`` compressed (a bigger one is not kept: the chat itself never depends on it). Stored in the
conversation database, deleted with their session (foreign key, ON DELETE CASCADE).
"""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass
from typing import Any

from ..soul.prompt_record import PromptAssembly, assembly_from_record, assembly_to_record
from .store import ConversationStore

log = logging.getLogger("didactyl.conversations")

MAX_RECORD_BYTES = 2 * 1024 * 1024  # compressed; a prompt that big is a pathological one
MAX_RECORD_TEXT = 64 * 1024 * 1024  # decompressed: a damaged or hostile row cannot balloon past this

_SCHEMA = """
CREATE TABLE IF NOT EXISTS assemblies (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    created_at REAL NOT NULL,
    record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS assemblies_by_session ON assemblies(session_id, id);
"""


@dataclass(frozen=True, slots=True)
class SavedAssembly:
    """One turn's prompt and how the turn ended (its reply, or why it failed)."""

    assembly: PromptAssembly
    reply: str | None = None
    failure: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None


class AssemblyLog:
    """Synchronous, on the store's connection and lock (call it through ``asyncio.to_thread``)."""

    def __init__(self, store: ConversationStore, *, keep: int) -> None:
        self.store = store
        self.keep = keep
        self._ready = False

    def _ensure_table(self) -> None:
        if not self._ready:
            with self.store.transaction() as db:  # same database, same lock: one writer
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
            self._ready = True

    def add(self, session_id: str, saved: SavedAssembly) -> bool:
        """Keep one turn's assembly (dropping the oldest past ``keep``); False when not kept (too big, or off)."""
        if self.keep <= 0:
            return False
        record = {"assembly": assembly_to_record(saved.assembly), "reply": saved.reply, "failure": saved.failure,
                  "prompt_tokens": saved.prompt_tokens, "completion_tokens": saved.completion_tokens,
                  "cost_usd": saved.cost_usd}
        blob = zlib.compress(json.dumps(record, ensure_ascii=False, default=str).encode(), 6)
        if len(blob) > MAX_RECORD_BYTES:
            log.info("a prompt assembly of %d bytes (compressed) was not kept", len(blob))
            return False
        self._ensure_table()
        with self.store.transaction() as db:
            db.execute("INSERT INTO assemblies (session_id, created_at, record) VALUES (?, ?, ?)",
                       (session_id, saved.assembly.created_at, blob))
            db.execute("DELETE FROM assemblies WHERE session_id = ? AND id NOT IN (SELECT id FROM assemblies "
                       "WHERE session_id = ? ORDER BY id DESC LIMIT ?)", (session_id, session_id, self.keep))
        return True

    def load(self, session_id: str) -> list[SavedAssembly]:
        """The kept assemblies, oldest first; an unreadable record is skipped (logged), never fatal."""
        self._ensure_table()
        with self.store.reading() as db:
            rows = db.execute(
                "SELECT record FROM assemblies WHERE session_id = ? ORDER BY id", (session_id,)).fetchall()
        out: list[SavedAssembly] = []
        for (blob,) in rows:
            try:
                inflater = zlib.decompressobj()
                text = inflater.decompress(blob, MAX_RECORD_TEXT)
                if inflater.unconsumed_tail:
                    raise ValueError("record too large")
                out.append(_saved_from(json.loads(text)))
            except (ValueError, KeyError, TypeError, zlib.error) as exc:
                log.warning("a stored prompt assembly could not be read: %s", exc)
        return out


def _saved_from(record: dict[str, Any]) -> SavedAssembly:
    return SavedAssembly(assembly_from_record(record["assembly"]), record.get("reply"), record.get("failure"),
                         record.get("prompt_tokens"), record.get("completion_tokens"), record.get("cost_usd"))
