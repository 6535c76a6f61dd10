"""The default memory backend: a local SQLite FTS5 index over past turns and the long-term memory.

For each user message it returns the few most relevant snippets (bm25 ranking, a small character budget)
under a ``## Recalled context`` heading, or None when nothing matches. The same index answers the
``memory_query(query)`` tool. User text never reaches FTS5 as query syntax: it is reduced to quoted words.

A guest conversation's turns are kept apart (``guest_turn``): they are searched only for that conversation's own
turns (``query_conversation``) and never show in the admin's context or ``memory_query`` — what a guest says
cannot reach the admin's prompts, and the admin's words cannot reach a guest's (agent/audience.py).
"""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...private_files import open_private_wal
from ...tools.registry import Tool, build_tool

log = logging.getLogger("didactyl.memory")

HEADING = "## Recalled context"
LONG_TERM = "long_term"
TURN = "turn"
GUEST_TURN = "guest_turn"  # a turn of a conversation that is not the admin's own: searched only within it
ADMIN_SOURCES = (TURN, LONG_TERM)  # what the admin's context and memory_query search

# Words too common to say anything about relevance (English; other languages simply rank by bm25).
_STOPWORDS = frozenset("""
a about above after again all am an and any are as at be been being below between both but by can could did
do does doing down during each few for from further had has have having he her here hers him his how i if in
into is it its itself just me more most my no nor not now of off on once only or other our ours out over own
same she should so some such than that the their theirs them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your yours
please tell know remember think recall anything something
""".split())
_WORD = re.compile(r"\w+", re.UNICODE)
_MAX_TERMS = 24


def fts_query(text: str) -> str | None:
    """An FTS5 MATCH expression from free text: distinct words, each quoted, OR-ed; None if nothing is left."""
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS or (len(word) < 2 and not word.isdigit()) or word in terms:
            continue
        terms.append(word)
        if len(terms) >= _MAX_TERMS:
            break
    if not terms:
        return None
    # Words only contain \w characters, so quoting makes each a plain phrase (no operators, columns or quotes).
    return " OR ".join(f'"{t}"' for t in terms)


@dataclass(frozen=True, slots=True)
class RecallHit:
    source: str  # "turn" | "long_term"
    text: str
    session_id: str
    created_at: float
    score: float


def split_paragraphs(text: str, max_chars: int = 600) -> list[str]:
    """Long-term memory in searchable pieces: paragraphs, long ones cut at line or sentence ends."""
    pieces: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        while len(block) > max_chars:
            cut = max(block.rfind("\n", 0, max_chars), block.rfind(". ", 0, max_chars))
            cut = cut + 1 if cut > max_chars // 3 else max_chars
            pieces.append(block[:cut].strip())
            block = block[cut:].strip()
        if block:
            pieces.append(block)
    return pieces


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class RecallBackend:
    """``recall``: local, offline, always available once its database opens."""

    id = "recall"

    def __init__(self, db_path: str | Path, *, context_chars: int = 1500, max_snippets: int = 4,
                 snippet_chars: int = 400, clock: Callable[[], float] = time.time,
                 index_long_term: bool = True) -> None:
        self.db_path = Path(db_path)
        self.context_chars = context_chars
        self.max_snippets = max_snippets
        self.snippet_chars = snippet_chars
        self._clock = clock
        # False ([memory] index_long_term = false): no plaintext copy of the long-term memory is kept here.
        self.indexes_long_term = index_long_term
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._error: str | None = None
        try:
            # 0600 whatever the data dir's mode or the umask: the index holds plaintext (agent.private_files).
            db = open_private_wal(db_path, check_same_thread=False, timeout=5.0, isolation_level=None)
            # Deleted text (a forgotten chat, long-term memory no longer indexed) is zeroed, not left in free pages.
            db.execute("PRAGMA secure_delete=ON")
            db.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS recall USING fts5("
                "text, source UNINDEXED, session_id UNINDEXED, created_at UNINDEXED, "
                "tokenize = 'porter unicode61')"
            )
            self._db = db
        except (sqlite3.Error, OSError) as exc:
            # No FTS5 in this SQLite, or the file cannot be opened: the backend is simply unavailable.
            self._error = str(exc)
            log.warning("recall backend unavailable: %s", exc)

    # --- MemoryBackend --------------------------------------------------------------------------------

    def is_available(self) -> bool:
        return self._db is not None

    async def query_context(self, session_id: str, user_message: str) -> str | None:
        hits = await asyncio.to_thread(self.search, user_message, self.max_snippets)
        return self.render_context(hits)

    def tools(self) -> list[Tool]:
        return [build_tool(self.memory_query, name="memory_query", family="memory")]

    async def record_turn(self, session_id: str, user_message: str, reply: str) -> None:
        await asyncio.to_thread(self.add_turn, session_id, user_message, reply)

    async def query_conversation(self, session_id: str, user_message: str) -> str | None:
        """A guest's turn: snippets of this conversation's own earlier turns only."""
        hits = await asyncio.to_thread(self.search, user_message, self.max_snippets, session_id=session_id)
        return self.render_context(hits)

    async def record_conversation_turn(self, session_id: str, user_message: str, reply: str) -> None:
        await asyncio.to_thread(self.add_turn, session_id, user_message, reply, GUEST_TURN)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    async def aclose(self) -> None:
        self.close()

    # --- the tool -------------------------------------------------------------------------------------

    async def memory_query(self, query: str) -> str:
        """Search past conversations and long-term memory by keywords; returns the best matching snippets.

        Args:
            query: Words to look for, e.g. "sister birthday" or "favourite editor".
        """
        hits = await asyncio.to_thread(self.search, query, 8)
        if not hits:
            return f"No matches for {query!r} in past conversations or long-term memory."
        lines = [f"{len(hits)} match(es) for {query!r}:"]
        for hit in hits:
            lines.append(f"- {self._label(hit)} {_clip(hit.text, self.snippet_chars)}")
        return "\n".join(lines)

    # --- index ----------------------------------------------------------------------------------------

    def add_turn(self, session_id: str, user_message: str, reply: str, source: str = TURN) -> None:
        text = f"User: {user_message.strip()}\nAssistant: {reply.strip()}"
        with self._lock:
            if self._db is None:
                return
            self._db.execute("INSERT INTO recall (text, source, session_id, created_at) VALUES (?, ?, ?, ?)",
                             (text, source, session_id, self._clock()))

    def index_long_term(self, text: str) -> int:
        """Replace the indexed long-term memory with ``text`` (call it when the memory changes).

        When long-term indexing is off, any copy indexed earlier is deleted instead and nothing is added."""
        pieces = split_paragraphs(text) if self.indexes_long_term else []
        now = self._clock()
        with self._lock:
            if self._db is None:
                return 0
            self._db.execute("BEGIN")
            try:
                self._db.execute("DELETE FROM recall WHERE source = ?", (LONG_TERM,))
                self._db.executemany(
                    "INSERT INTO recall (text, source, session_id, created_at) VALUES (?, ?, '', ?)",
                    [(p, LONG_TERM, now) for p in pieces],
                )
                self._db.execute("COMMIT")
            except sqlite3.Error:
                self._db.execute("ROLLBACK")
                raise
        return len(pieces)

    def forget_session(self, session_id: str) -> None:
        """Drop a deleted conversation's turns from the index."""
        with self._lock:
            if self._db is not None:
                self._db.execute("DELETE FROM recall WHERE source IN (?, ?) AND session_id = ?",
                                 (TURN, GUEST_TURN, session_id))

    def search(self, text: str, limit: int, *, session_id: str | None = None) -> list[RecallHit]:
        """The best matches among the admin's turns and long-term memory; with ``session_id``, among that
        conversation's own turns only (a guest's)."""
        query = fts_query(text)
        if query is None:
            return []
        args: tuple[str, ...]
        if session_id is None:
            where, args = "source IN (?, ?)", ADMIN_SOURCES
        else:
            where, args = "source IN (?, ?) AND session_id = ?", (TURN, GUEST_TURN, session_id)
        with self._lock:
            if self._db is None:
                return []
            try:
                rows = self._db.execute(
                    "SELECT text, source, session_id, created_at, bm25(recall) AS score FROM recall "
                    f"WHERE recall MATCH ? AND {where} ORDER BY score LIMIT ?", (query, *args, limit)
                ).fetchall()
            except sqlite3.Error as exc:  # should not happen after sanitizing; never break a turn over it
                log.warning("recall search failed for %r: %s", query, exc)
                return []
        return [RecallHit(r[1], r[0], r[2], float(r[3]), float(r[4])) for r in rows]

    # --- rendering ------------------------------------------------------------------------------------

    @staticmethod
    def _label(hit: RecallHit) -> str:
        if hit.source == LONG_TERM:
            return "[long-term memory]"
        day = time.strftime("%Y-%m-%d", time.localtime(hit.created_at))
        return f"[conversation {day}]"

    def render_context(self, hits: list[RecallHit]) -> str | None:
        if not hits:
            return None
        lines = [HEADING, "Snippets from past conversations and long-term memory that may be relevant "
                 "(they may be out of date):"]
        used = sum(len(line) for line in lines)
        for hit in hits:
            line = f"- {self._label(hit)} {_clip(hit.text, self.snippet_chars)}"
            if used + len(line) > self.context_chars:
                break
            lines.append(line)
            used += len(line)
        if len(lines) == 2:
            return None
        return "\n".join(lines)
