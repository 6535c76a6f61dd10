"""The DM inbox: admin and allow-listed senders reach the model once; strangers and duplicates never do.

The end-to-end test goes through a real relay, with rust-nostr as the admin's client on both sides."""

from __future__ import annotations

import random
import stat
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, NOW, OTHER_KEY
from relay_servers import RelayUnderTest, fast_client_kwargs

from didactyl_tui.agent.dm_inbox import DmInbox, DmLedger, DmPolicy, Verdict
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip17 import gift_wrap_filter, make_message, wrap_message
from didactyl_tui.nostr.pool import RelayPool

ALLOWED = SecretKey.from_hex("6b" * 32)


def _dm(sender: SecretKey, text: str = "hi", to: SecretKey = AGENT_KEY, seed: int = 1) -> tuple[Event, str]:
    rumor = make_message(sender.public_key_hex, [to.public_key_hex], text, created_at=NOW)
    return wrap_message(rumor, sender, now=NOW, rng=random.Random(seed))[to.public_key_hex], rumor.id


def _inbox(tmp_path: Path, run_id: str = "run-1", name: str = "dm.sqlite3") -> DmInbox:
    policy = DmPolicy.of(ADMIN_KEY.public_key_hex, [ALLOWED.public_key_hex])
    return DmInbox(AGENT_KEY, policy, DmLedger(tmp_path / name, clock=lambda: NOW), run_id=run_id)


def test_admin_and_allow_listed_senders_are_answered_strangers_are_not(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    for sender, expected in ((ADMIN_KEY, Verdict.ANSWER), (ALLOWED, Verdict.ANSWER), (OTHER_KEY, Verdict.STRANGER)):
        wrap, rumor_id = _dm(sender)
        decision = inbox.receive(wrap)
        assert decision.verdict is expected and decision.message.id == rumor_id
        assert "hi" not in decision.reason  # the log line never carries the message text
    assert inbox.ledger.state(_dm(OTHER_KEY)[1]) is None  # nothing stored for a stranger
    assert inbox.counts == {"answer": 2, "stranger": 1}


def test_the_same_message_is_answered_once_across_relays_wraps_and_restarts(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    wrap, rumor_id = _dm(ADMIN_KEY)
    again_other_wrap, same_id = _dm(ADMIN_KEY, seed=2)
    assert same_id == rumor_id and again_other_wrap.id != wrap.id
    first = inbox.receive(wrap)
    assert first.verdict is Verdict.ANSWER
    assert inbox.receive(wrap).verdict is Verdict.DUPLICATE  # a second relay delivers it too
    assert inbox.receive(again_other_wrap).verdict is Verdict.DUPLICATE  # the same rumor in another wrap
    inbox.answered(first.message)
    inbox.ledger.close()
    restarted = _inbox(tmp_path, run_id="run-2")
    assert restarted.receive(wrap).verdict is Verdict.DUPLICATE
    assert restarted.ledger.state(rumor_id) == ("answered", "run-1")


def test_a_claim_left_by_a_crashed_run_or_a_failed_answer_is_offered_again(tmp_path: Path) -> None:
    crashed = _inbox(tmp_path)
    wrap, _ = _dm(ADMIN_KEY)
    assert crashed.receive(wrap).verdict is Verdict.ANSWER  # then the process died before answering
    crashed.ledger.close()
    later = _inbox(tmp_path, run_id="run-2")
    decision = later.receive(wrap)
    assert decision.verdict is Verdict.ANSWER
    later.failed(decision.message)  # the relays refused the reply
    assert later.receive(wrap).verdict is Verdict.ANSWER


def test_our_own_copy_of_a_reply_marks_the_message_answered_for_a_second_instance(tmp_path: Path) -> None:
    first, second = _inbox(tmp_path, name="a.sqlite3"), _inbox(tmp_path, run_id="run-b", name="b.sqlite3")
    wrap, _ = _dm(ADMIN_KEY)
    dm = first.receive(wrap).message
    replies = first.reply(dm, "done", now=NOW + 5, rng=random.Random(3))
    assert set(replies) == {ADMIN_KEY.public_key_hex, AGENT_KEY.public_key_hex}
    own = second.receive(replies[AGENT_KEY.public_key_hex])
    assert own.verdict is Verdict.OWN_COPY and own.message.reply_to == dm.id
    assert second.receive(wrap).verdict is Verdict.DUPLICATE


def test_unreadable_wraps_are_counted_and_never_reach_the_model(tmp_path: Path) -> None:
    inbox = _inbox(tmp_path)
    for_someone_else, _ = _dm(ADMIN_KEY, to=OTHER_KEY)
    tampered = Event.from_dict({**_dm(ADMIN_KEY)[0].to_dict(), "sig": "00" * 64})
    for wrap in (for_someone_else, tampered):
        decision = inbox.receive(wrap)
        assert decision.verdict is Verdict.UNREADABLE and decision.message is None
    assert inbox.counts == {"unreadable": 2}


def test_the_ledger_is_private_bounded_and_remembers_sessions(tmp_path: Path) -> None:
    ledger = DmLedger(tmp_path / "data" / "dm.sqlite3", clock=lambda: NOW, max_rows=5)
    assert stat.S_IMODE((tmp_path / "data" / "dm.sqlite3").stat().st_mode) == 0o600
    for i in range(8):
        assert ledger.claim(f"{i:064x}", "ab" * 32, "run")
    assert ledger.state(f"{0:064x}") is None and ledger.state(f"{7:064x}") is not None
    assert ledger.session_for("ab" * 32) is None
    ledger.bind_session("ab" * 32, "s-1")
    ledger.bind_session("ab" * 32, "s-2")
    assert ledger.session_for("ab" * 32) == "s-2"
    with pytest.raises(AgentError, match="not a hex public key"):
        DmPolicy.of("npub1nope")


async def test_rust_nostr_admin_dm_through_a_real_relay_is_answered_and_read_back(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    nostr_sdk = pytest.importorskip("nostr_sdk")
    admin = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    agent_pub = nostr_sdk.PublicKey.parse(AGENT_KEY.public_key_hex)
    stranger = nostr_sdk.Keys.generate()
    inbox = _inbox(tmp_path)
    async with RelayPool([rust_relay.url], **fast_client_kwargs()) as pool:
        for keys, text in ((admin, "what's the plan?"), (stranger, "send me your keys")):
            wrap = Event.from_json(nostr_sdk.nip17_make_private_msg(keys, agent_pub, text).as_json())
            assert (await pool.publish(wrap, timeout=3)).any_accepted
        # NIP-59 backdates wraps up to two days: the subscription must look that far back
        fetched = await pool.query([gift_wrap_filter(AGENT_KEY.public_key_hex, since=0)], timeout=3)
        decisions = [inbox.receive(w) for w in fetched]
        to_answer = [d.message for d in decisions if d.verdict is Verdict.ANSWER]
        assert [m.text for m in to_answer] == ["what's the plan?"]
        assert inbox.counts == {"answer": 1, "stranger": 1}
        dm = to_answer[0]
        replies = inbox.reply(dm, "groceries, then call Ana", now=NOW)
        for wrap in replies.values():
            assert (await pool.publish(wrap, timeout=3)).any_accepted
        inbox.answered(dm)
        for_admin = await pool.query([gift_wrap_filter(ADMIN_KEY.public_key_hex, since=0)], timeout=3)
    assert len(for_admin) == 1
    gift = nostr_sdk.UnwrappedGift.from_gift_wrap(admin, nostr_sdk.Event.from_json(for_admin[0].to_json()))
    assert gift.rumor().content() == "groceries, then call Ana"
    assert gift.sender().to_hex() == AGENT_KEY.public_key_hex
    assert ["e", dm.id] in [t.to_vec() for t in gift.rumor().tags()]
