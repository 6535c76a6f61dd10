"""The lineage rule (agent/documents/lineage.py) on a real history file: a later edit reaches our version through
its base chain; a concurrent one branches off before it; untagged or unknown bases are judged by whether our
version had reached a relay."""

from __future__ import annotations

from pathlib import Path

from agent_support import AGENT_KEY, memory_event

from didactyl_tui.agent.documents.history import DocumentHistory
from didactyl_tui.agent.documents.lineage import MAX_CHAIN, Relation, base_of, relation

T0 = 1_750_000_000


def history(tmp_path: Path) -> DocumentHistory:
    return DocumentHistory(tmp_path / "history.sqlite3")


def test_a_chain_that_reaches_ours_is_a_later_edit(tmp_path: Path) -> None:
    h = history(tmp_path)
    base = memory_event(AGENT_KEY, "base", T0)
    ours = memory_event(AGENT_KEY, "ours", T0 + 1, prev=base.id)
    theirs_1 = memory_event(AGENT_KEY, "theirs 1", T0 + 2, prev=ours.id)
    theirs_2 = memory_event(AGENT_KEY, "theirs 2", T0 + 3, prev=theirs_1.id)
    for ev in (base, ours, theirs_1):
        h.record(ev, "remote")
    assert base_of(theirs_2) == theirs_1.id and base_of(base) is None
    assert relation(h, theirs_1, ours) is Relation.LATER_EDIT
    assert relation(h, theirs_2, ours) is Relation.LATER_EDIT  # through a version seen here


def test_a_version_edited_from_an_older_one_is_concurrent(tmp_path: Path) -> None:
    h = history(tmp_path)
    base = memory_event(AGENT_KEY, "base", T0)
    ours = memory_event(AGENT_KEY, "ours", T0 + 1, prev=base.id)
    theirs = memory_event(AGENT_KEY, "theirs", T0 + 2, prev=base.id)
    for ev in (base, ours):
        h.record(ev, "local")
    h.mark_delivered(ours.id)  # even delivered: the base tag says they did not build on it
    assert relation(h, theirs, ours) is Relation.CONCURRENT


def test_untagged_and_unknown_bases_are_judged_by_delivery(tmp_path: Path) -> None:
    h = history(tmp_path)
    ours = memory_event(AGENT_KEY, "ours", T0)
    h.record(ours, "local")
    untagged = memory_event(AGENT_KEY, "another client", T0 + 5)
    unknown_base = memory_event(AGENT_KEY, "built on a version never seen here", T0 + 6, prev="ab" * 32)
    assert relation(h, untagged, ours) is Relation.CONCURRENT  # ours never reached a relay
    assert relation(h, unknown_base, ours) is Relation.CONCURRENT
    h.mark_delivered(ours.id)
    assert relation(h, untagged, ours) is Relation.LATER_EDIT  # a relay had it: they could have read it
    assert relation(h, unknown_base, ours) is Relation.LATER_EDIT


def test_a_base_chain_is_walked_a_bounded_number_of_steps(tmp_path: Path) -> None:
    h = history(tmp_path)
    ours = memory_event(AGENT_KEY, "ours", T0)
    h.record(ours, "local")
    prev, chain = ours.id, []
    for n in range(MAX_CHAIN + 5):
        ev = memory_event(AGENT_KEY, f"v{n}", T0 + 1 + n, prev=prev)
        chain.append(ev)
        prev = ev.id
    for ev in chain[:-1]:
        h.record(ev, "remote")
    # Longer than the bound: judged like an untagged version (ours was never delivered: concurrent).
    assert relation(h, chain[-1], ours) is Relation.CONCURRENT
    assert relation(h, chain[10], ours) is Relation.LATER_EDIT
