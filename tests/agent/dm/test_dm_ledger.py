"""The DM ledger: each message's states, the outbox of reply wraps, and the bounds (rows, time to give up)."""

from __future__ import annotations

import random
import sqlite3
import stat
from pathlib import Path

from agent_support import ADMIN_KEY, AGENT_KEY, NOW

from didactyl_tui.agent.dm.ledger import DmLedger
from didactyl_tui.nostr.nip17 import make_message, wrap_message


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _reply_wraps(rumor_id: str) -> list[tuple[str, object, bool]]:
    rumor = make_message(AGENT_KEY.public_key_hex, [ADMIN_KEY.public_key_hex], "ok", created_at=NOW, reply_to=rumor_id)
    wraps = wrap_message(rumor, AGENT_KEY, now=NOW, rng=random.Random(1))
    return [(pk, w, pk == ADMIN_KEY.public_key_hex) for pk, w in wraps.items()]


def test_a_message_goes_received_answering_written_delivered(tmp_path: Path) -> None:
    clock = Clock()
    ledger = DmLedger(tmp_path / "data" / "dm.sqlite3", clock=clock)
    assert stat.S_IMODE((tmp_path / "data" / "dm.sqlite3").stat().st_mode) == 0o600
    rid = "ab" * 32
    assert ledger.claim(rid, ADMIN_KEY.public_key_hex, "run", room=ADMIN_KEY.public_key_hex)
    assert not ledger.claim(rid, ADMIN_KEY.public_key_hex, "run")  # this run has it
    assert ledger.record(rid).state == "received"
    assert ledger.start_answering(rid, "run") and ledger.record(rid).state == "answering"
    wraps = _reply_wraps(rid)
    assert ledger.write_reply(rid, "run", wraps)
    assert ledger.record(rid).state == "written" and ledger.waiting() == 2
    mine = next(w for pk, w, _ in wraps if pk == AGENT_KEY.public_key_hex)
    theirs = next(w for pk, w, _ in wraps if pk == ADMIN_KEY.public_key_hex)
    # Our own copy taken, theirs refused: the message is not delivered.
    own = ledger.record_attempt(mine.id, {"ws://a": "accepted"}, next_attempt_at=NOW + 1, give_up_after_s=60)
    assert own.state == "delivered" and own.message_state is None
    refused = ledger.record_attempt(theirs.id, {"ws://a": "rejected: blocked: not on the list"},
                                    next_attempt_at=NOW + 1, give_up_after_s=60)
    assert refused.state == "pending" and refused.message_state is None and "blocked" in refused.detail
    assert ledger.record(rid).state == "written" and ledger.due(NOW) == [] and len(ledger.due(NOW + 1)) == 1
    clock.now = NOW + 5
    done = ledger.record_attempt(theirs.id, {"ws://a": "accepted", "ws://b": "timeout: no OK"},
                                 next_attempt_at=NOW + 9, give_up_after_s=60)
    assert done.message_state == "delivered" and done.attempts == 2
    assert ledger.record(rid).state == "delivered" and ledger.record(rid).detail == "ws://a"
    assert ledger.waiting() == 0 and ledger.next_due() is None
    assert ledger.counts() == {"delivered": 1}


def test_a_reply_no_relay_takes_is_given_up_after_the_bound_with_its_reason(tmp_path: Path) -> None:
    clock = Clock()
    ledger = DmLedger(tmp_path / "dm.sqlite3", clock=clock)
    rid = "cd" * 32
    ledger.claim(rid, ADMIN_KEY.public_key_hex, "run")
    wraps = _reply_wraps(rid)
    ledger.write_reply(rid, "run", wraps)
    theirs = next(w for pk, w, _ in wraps if pk == ADMIN_KEY.public_key_hex)
    clock.now = NOW + 61
    out = ledger.record_attempt(theirs.id, {}, next_attempt_at=NOW + 70, give_up_after_s=60)
    assert out.state == "given_up" and out.message_state == "given_up"
    record = ledger.record(rid)
    assert record.state == "given_up" and "no relay to send it to" in record.detail
    assert [r.rumor_id for r in ledger.given_up()] == [rid]
    assert not ledger.claim(rid, ADMIN_KEY.public_key_hex, "run-2")  # never answered twice


def test_a_claim_by_a_run_that_ended_is_taken_over_but_a_written_reply_never(tmp_path: Path) -> None:
    ledger = DmLedger(tmp_path / "dm.sqlite3", clock=Clock())
    ledger.claim("01" * 32, "s", "old")
    ledger.claim("02" * 32, "s", "old")
    ledger.start_answering("02" * 32, "old")
    ledger.claim("03" * 32, "s", "old")
    ledger.write_reply("03" * 32, "old", _reply_wraps("03" * 32))
    assert ledger.claim("01" * 32, "s", "new") and ledger.claim("02" * 32, "s", "new")
    assert not ledger.claim("03" * 32, "s", "new")
    assert not ledger.write_reply("01" * 32, "old", [])  # the old run lost it


def test_the_first_ledger_is_read_and_the_rows_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "dm.sqlite3"
    with sqlite3.connect(path) as db:  # the schema and states of the first version
        db.executescript("CREATE TABLE dm_seen (rumor_id TEXT PRIMARY KEY, sender TEXT NOT NULL, state TEXT NOT NULL,"
                         " run_id TEXT NOT NULL, updated_at REAL NOT NULL);"
                         "CREATE TABLE dm_rooms (counterpart TEXT PRIMARY KEY, session_id TEXT NOT NULL);")
        db.execute("INSERT INTO dm_seen VALUES (?, 's', 'answered', 'r', 1)", ("0a" * 32,))
        db.execute("INSERT INTO dm_seen VALUES (?, 's', 'pending', 'r', 2)", ("0b" * 32,))
        db.execute("INSERT INTO dm_rooms VALUES ('s', 'session-1')")
    ledger = DmLedger(path, clock=Clock(), max_rows=5)
    assert ledger.state("0a" * 32) == ("delivered", "r") and ledger.state("0b" * 32) == ("received", "r")
    assert ledger.session_for("s") == "session-1"
    for i in range(8):
        ledger.claim(f"{i:064x}", "s", "run")
        ledger.start_answering(f"{i:064x}", "run")
    # Only finished messages are forgotten: the one delivered earlier goes, those under way stay.
    assert ledger.state("0a" * 32) is None and ledger.state(f"{0:064x}") is not None
