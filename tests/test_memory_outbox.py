"""The outbox: written before sending, retried until accepted, never stale after newer."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from didactyl_tui.agent.memory.history import MemoryHistory, unified_diff
from didactyl_tui.agent.memory.outbox import DELIVERED, PENDING, SUPERSEDED, Outbox, backoff_delay
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.results import PublishOutcome, RelayVerdict, Verdict

SK = SecretKey.from_hex("02" * 32)
A, B = "ws://a.test", "ws://b.test"


def memory_event(content: str, created_at: int, d: str = "short_term_memory"):
    return sign_event(SK, kind=30078, content=content, created_at=created_at, tags=[["d", d], ["app", "didactyl"]])


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def outcome(ev, **verdicts: tuple[Verdict, str]) -> PublishOutcome:
    urls = {"a": A, "b": B}
    return PublishOutcome(ev.id, {urls[k]: RelayVerdict(urls[k], v, m) for k, (v, m) in verdicts.items()})


def test_enqueue_then_pending_until_a_relay_accepts(tmp_path: Path) -> None:
    clock = Clock()
    box = Outbox(tmp_path / "o.sqlite3", clock=clock)
    ev = memory_event("v1", 100)
    assert box.enqueue(ev) == PENDING
    assert [e.event.id for e in box.pending()] == [ev.id]
    entry = box.record(outcome(ev, a=(Verdict.TIMEOUT, ""), b=(Verdict.NOT_CONNECTED, "")))
    assert entry is not None and entry.state == PENDING and entry.attempts == 1
    assert entry.next_attempt_at > clock.t  # backoff scheduled
    assert box.due([A, B]) == []
    clock.t = entry.next_attempt_at
    assert [e.event.id for e in box.due([A, B])] == [ev.id]
    entry = box.record(outcome(ev, a=(Verdict.ACCEPTED, ""), b=(Verdict.NOT_CONNECTED, "")))
    assert entry.state == DELIVERED and entry.accepted_by == [A]
    assert box.pending() == []
    # b still needs it: it stays unfinished for b only
    assert [e.relays_to_retry([A, B]) for e in box.unfinished([A, B])] == [[B]]


def test_pending_survives_restart(tmp_path: Path) -> None:
    ev = memory_event("v1", 100)
    Outbox(tmp_path / "o.sqlite3").enqueue(ev)
    again = Outbox(tmp_path / "o.sqlite3")
    assert [e.event for e in again.pending()] == [ev]


def test_newer_version_supersedes_pending_older(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    old, new = memory_event("old", 100), memory_event("new", 101)
    box.enqueue(old)
    box.enqueue(new)
    assert box.get(old.id).state == SUPERSEDED
    assert [e.event.id for e in box.pending()] == [new.id]
    # an older version enqueued late is superseded at once: stale content is never sent after newer
    late = memory_event("stale", 99)
    assert box.enqueue(late) == SUPERSEDED
    assert [e.event.id for e in box.unfinished([A])] == [new.id]


def test_other_addresses_are_independent(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    stm, ltm = memory_event("s", 100), memory_event("l", 90, d="long_term_memory")
    box.enqueue(stm)
    box.enqueue(ltm)
    assert {e.event.id for e in box.pending()} == {stm.id, ltm.id}


def test_remote_newer_version_supersedes_local_pending(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    mine = memory_event("mine", 100)
    box.enqueue(mine)
    box.mark_superseded_by(memory_event("theirs", 105))
    assert box.pending() == []


def test_final_rejection_is_not_retried_for_that_relay(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    ev = memory_event("v", 100)
    box.enqueue(ev)
    entry = box.record(outcome(ev, a=(Verdict.REJECTED, "blocked: not allowed"), b=(Verdict.ACCEPTED, "")))
    assert entry.relays[A].startswith("refused")
    assert box.unfinished([A, B]) == []


def test_backoff_grows_and_is_capped() -> None:
    import random

    rng = random.Random(1)
    highs = [max(backoff_delay(n, base=1, cap=30, rng=rng) for _ in range(200)) for n in range(8)]
    assert highs[0] <= 1 and highs[3] <= 8 and highs[7] <= 30
    assert highs[4] > highs[1]


def _hold_lock(path: str, ready, release) -> None:  # runs in another process
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    ready.set()
    release.wait(20)
    db.execute("ROLLBACK")


def test_database_locked_by_another_process_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    box = Outbox(path)
    box._db.execute("PRAGMA busy_timeout=200")  # keep the test short
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_lock, args=(str(path), ready, release))
    proc.start()
    try:
        assert ready.wait(20)
        with pytest.raises(AgentError, match="locked"):
            box.enqueue(memory_event("v", 100))
    finally:
        release.set()
        proc.join(20)
    # once the other process lets go, the same edit goes through: nothing lost
    assert box.enqueue(memory_event("v", 100)) == PENDING


def test_history_keeps_every_version_encrypted_and_newest_first(tmp_path: Path) -> None:
    hist = MemoryHistory(tmp_path / "h.sqlite3")
    v1, v2 = memory_event("ciphertext-1", 100), memory_event("ciphertext-2", 101)
    assert hist.record(v1, "local") is True
    assert hist.record(v2, "remote") is True
    assert hist.record(v2, "remote") is False
    versions = hist.versions("short_term_memory")
    assert [v.event.id for v in versions] == [v2.id, v1.id]
    assert [v.origin for v in versions] == ["remote", "local"]
    hist.annotate(v1.id, "lost to a newer version from another device")
    assert hist.get(v1.id).note.startswith("lost")
    assert hist.versions("long_term_memory") == []


def test_unified_diff() -> None:
    assert unified_diff("a\nb\n", "a\nb\n") == ""
    diff = unified_diff("a\nb\n", "a\nc\n")
    assert "-b" in diff and "+c" in diff
