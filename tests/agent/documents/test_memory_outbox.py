"""The outbox: written before sending, retried until accepted, never stale after newer."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lock_holder import LockHolder

from didactyl_tui.agent.documents.history import DocumentHistory
from didactyl_tui.agent.documents.outbox import DELIVERED, PENDING, REFUSED, SUPERSEDED, Outbox, backoff_delay
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.replaceable import is_newer, newest
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


def test_database_locked_by_another_process_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    box = Outbox(path)
    box._db.execute("PRAGMA busy_timeout=200")  # keep the test short
    with LockHolder(path):
        with pytest.raises(AgentError, match="locked"):
            box.enqueue(memory_event("v", 100))
    # once the other process lets go, the same edit goes through: nothing lost
    assert box.enqueue(memory_event("v", 100)) == PENDING


def test_history_keeps_every_version_encrypted_and_newest_first(tmp_path: Path) -> None:
    hist = DocumentHistory(tmp_path / "h.sqlite3")
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


# --- property: whatever order saves and remote versions arrive in --------------------------------

_D_TAGS = ("short_term_memory", "long_term_memory")
# (what happens, which memory, created_at, a salt so equal timestamps give different ids)
_arrival = st.tuples(
    st.sampled_from(["save", "remote", "echo", "record"]),
    st.integers(0, 1),
    st.integers(100, 104),  # a narrow range: many ties, so the lowest-id rule is exercised
    st.integers(0, 3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_arrival, min_size=1, max_size=14))
def test_outbox_never_leaves_a_non_newest_entry_live(arrivals: list[tuple[str, int, int, int]]) -> None:
    """Saves (enqueue), versions seen on relays (mark_superseded_by), our own saves echoed back and
    publish results (record) in any order: per memory, at most the newest known version is live
    (not superseded), and it is live exactly when it is one of our saves."""
    with tempfile.TemporaryDirectory() as tmp:
        box = Outbox(Path(tmp) / "o.sqlite3")
        saved: list = []
        seen: list = []  # everything known: our saves and remote versions
        for what, mem, created_at, salt in arrivals:
            d = _D_TAGS[mem]
            ev = memory_event(f"{what}-{salt}-{created_at}", created_at, d=d)
            if what == "save":
                before = newest(e for e in seen if e.d_tag == d)
                state = box.enqueue(ev)
                expect_live = before is None or before.id == ev.id or not is_newer(before, ev)
                assert (state != SUPERSEDED) == expect_live, (state, ev.created_at, before and before.created_at)
                saved.append(ev)
                seen.append(ev)
            elif what == "remote":
                box.mark_superseded_by(ev)
                seen.append(ev)
            elif what == "echo" and saved:
                box.mark_superseded_by(saved[salt % len(saved)])  # our own save coming back from a relay
            elif what == "record" and saved:
                target = saved[salt % len(saved)]
                verdict = (Verdict.ACCEPTED, "") if salt % 2 else (Verdict.TIMEOUT, "")
                box.record(outcome(target, a=verdict))
            for dd in _D_TAGS:
                best = newest(e for e in seen if e.d_tag == dd)
                live = [e.event.id for e in box.entries() if e.event.d_tag == dd and e.state != SUPERSEDED]
                saved_ids = {e.id for e in saved}
                if best is not None and best.id in saved_ids:
                    assert live == [best.id]
                else:
                    assert live == []
        box.close()


# --- verdict classification and states ------------------------------------------------------------


def test_relay_holding_newer_version_is_final_for_that_relay(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    ev = memory_event("v", 100)
    box.enqueue(ev)
    entry = box.record(outcome(ev, a=(Verdict.REJECTED, "replaced: have a newer version"), b=(Verdict.TIMEOUT, "")))
    assert entry.relays[A].startswith("replaced:") and entry.state == PENDING
    assert entry.relays_to_retry([A, B]) == [B]
    entry = box.record(outcome(ev, b=(Verdict.REJECTED, "blocked: no")))
    assert entry.state == REFUSED and box.unfinished([A, B]) == []
    assert "replaced: have a newer version" in entry.last_error and "blocked: no" in entry.last_error


def test_transient_rejections_are_retried(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    ev = memory_event("v", 100)
    box.enqueue(ev)
    for msg in ("error: db busy", "rate-limited: slow down", "auth-required: log in", ""):
        entry = box.record(outcome(ev, a=(Verdict.REJECTED, msg)))
        assert entry.relays[A].startswith("retry: rejected") and entry.state == PENDING


def test_accepted_relay_stays_accepted_after_a_later_timeout(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    ev = memory_event("v", 100)
    box.enqueue(ev)
    box.record(outcome(ev, a=(Verdict.ACCEPTED, "")))
    entry = box.record(outcome(ev, a=(Verdict.TIMEOUT, ""), b=(Verdict.REJECTED, "duplicate: have it")))
    assert entry.relays == {A: "accepted", B: "accepted"} and entry.state == DELIVERED


def test_require_marks_lagging_relays_and_adopts_remote_versions(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    mine = memory_event("mine", 100)
    box.enqueue(mine)
    box.record(outcome(mine, a=(Verdict.ACCEPTED, ""), b=(Verdict.ACCEPTED, "")))
    # b lost it (a relay restart without storage): reconcile asks for it again
    assert box.require(mine, [B]) == DELIVERED
    assert box.get(mine.id).relays_to_retry([A, B]) == [B]
    # a newer version seen on a relay is adopted, superseding ours, and owed to the laggards
    theirs = memory_event("theirs", 105)
    assert box.require(theirs, [A]) == DELIVERED
    assert box.get(mine.id).state == SUPERSEDED
    assert [e.event.id for e in box.due([A, B])] == [theirs.id]
    # an older one is never adopted as live
    assert box.require(memory_event("older", 90), [A]) == SUPERSEDED


def test_outbox_entries_describe_their_status(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "o.sqlite3")
    ev = memory_event("v", 100)
    box.enqueue(ev)
    entry = box.record(outcome(ev, a=(Verdict.TIMEOUT, "no OK within 5s")))
    assert entry.describe() == f"pending (1 attempt; {A}: retry: timeout: no OK within 5s)"


def test_prune_forgets_only_old_superseded_entries(tmp_path: Path) -> None:
    clock = Clock()
    box = Outbox(tmp_path / "o.sqlite3", clock=clock)
    v1, v2 = memory_event("v1", 100), memory_event("v2", 101)
    box.enqueue(v1)
    box.enqueue(v2)
    assert box.prune(older_than=60) == 0  # superseded, but recent
    clock.t += 61
    v3 = memory_event("v3", 102)
    box.enqueue(v3)  # supersedes v2; v3 itself is new
    assert box.prune(older_than=60) == 2
    assert box.get(v1.id) is None and box.get(v2.id) is None and box.get(v3.id).state == PENDING
    assert box.enqueue(v2) == SUPERSEDED  # forgetting it does not let it come back


def test_history_versions_by_author(tmp_path: Path) -> None:
    hist = DocumentHistory(tmp_path / "h.sqlite3")
    other = SecretKey.from_hex("04" * 32)
    mine = memory_event("mine", 100)
    theirs = sign_event(other, kind=30078, content="x", created_at=101, tags=[["d", "short_term_memory"]])
    hist.record(mine, "local")
    hist.record(theirs, "remote")
    assert [v.event.id for v in hist.versions("short_term_memory", author=SK.public_key_hex)] == [mine.id]
    assert len(hist.versions("short_term_memory")) == 2
