"""A conversation knows the agent it is with (#31): this data dir's own (NULL) or one that runs elsewhere (its key,
``didactyl attach``). A database made before sessions knew it gets the column, and the conversations attach kept
then (bound in ``attach.sqlite3``) are marked when it is first opened."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agent_support import AGENT_KEY, OTHER_KEY

from didactyl_tui.agent.conversations.records import export_records, restore_records
from didactyl_tui.agent.conversations.seen_messages import SeenMessages
from didactyl_tui.agent.conversations.store import ConversationStore

AGENT, OTHER = AGENT_KEY.public_key_hex, OTHER_KEY.public_key_hex


def test_a_conversation_is_made_with_its_agent_and_found_by_it(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    local = store.new_session("here")
    attached = store.new_session("Attached", agent=AGENT)
    assert {s.id: s.agent for s in store.list_sessions()} == {local: None, attached: AGENT}
    assert (store.session_agent(local), store.session_agent(attached)) == (None, AGENT)
    assert store.session_with_agent(AGENT) == attached and store.session_with_agent(OTHER) is None
    assert store.session_agent("no-such-id") is None
    records = export_records(store)
    assert [r.get("agent") for r in records] == [AGENT, None]  # a backup keeps the mark
    again = ConversationStore(tmp_path / "restored.sqlite3")
    restore_records(again, records)
    assert again.session_agent(attached) == AGENT and again.session_agent(local) is None


def test_an_older_database_gets_its_attached_conversations_marked_from_attach_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    with sqlite3.connect(path) as db:  # as a version before #31 made it: sessions without an agent
        db.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '', created_at REAL NOT "
                   "NULL, updated_at REAL NOT NULL)")
        db.executemany("INSERT INTO sessions VALUES (?, ?, 1, 1)", [("s-local", "mine"), ("s-attached", "Attached")])
    db.close()
    seen = SeenMessages(tmp_path / "attach.sqlite3")
    seen.bind_session(f"agent:{AGENT}", "s-attached")
    seen.bind_session("agent:not-a-key", "s-local")  # never taken for a mark
    seen.close()

    store = ConversationStore(path, attach_bindings=tmp_path / "attach.sqlite3")
    assert {s.id: s.agent for s in store.list_sessions()} == {"s-local": None, "s-attached": AGENT}
    store.set_session_agent("s-attached", None)  # marked once, when the column came: never again behind one's back
    store.close()
    reopened = ConversationStore(path, attach_bindings=tmp_path / "attach.sqlite3")
    assert reopened.session_agent("s-attached") is None
