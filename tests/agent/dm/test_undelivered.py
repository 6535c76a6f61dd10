"""attach's waiting messages (agent/dm/undelivered.py): kept with their signed wraps, found again by their words (a
retry is the same message), bounded in count (past it nothing new is kept), private, and forgotten once delivered."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, NOW

from didactyl_tui.agent.dm.undelivered import Outgoing, Undelivered
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.nip17 import make_message, wrap_message

AGENT, ADMIN = AGENT_KEY.public_key_hex, ADMIN_KEY.public_key_hex


def _outgoing(text: str, at: int = NOW) -> Outgoing:
    rumor = make_message(ADMIN, [AGENT], text, created_at=at)
    wraps = wrap_message(rumor, ADMIN_KEY, now=at)
    return Outgoing(rumor.id, at, text, wraps[AGENT], wraps[ADMIN])


def test_a_waiting_message_is_kept_as_signed_found_by_its_words_and_forgotten_once_delivered(tmp_path: Path) -> None:
    path = tmp_path / "attach-outbox.sqlite3"
    box = Undelivered(path)
    first = _outgoing("are you there?")
    box.add(AGENT, "s1", first)
    box.tried(first.rumor_id, "ws://x: not_connected")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    box.close()
    box = Undelivered(path)  # across restarts
    [kept] = box.waiting(AGENT)
    assert kept.message == first and kept.tries == 1 and kept.reason == "ws://x: not_connected"
    assert kept.message.wrap.to_json() == first.wrap.to_json()  # the same wrap: the same message when sent again
    assert box.find(AGENT, "s1", "are you there?") == kept and box.find(AGENT, "s2", "are you there?") is None
    assert box.waiting(ADMIN) == []
    assert box.delivered(first.rumor_id) and not box.delivered(first.rumor_id)
    assert box.waiting(AGENT) == []


def test_past_its_bound_a_new_message_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    box = Undelivered(tmp_path / "attach-outbox.sqlite3", max_waiting=3)
    for n in range(3):
        box.add(AGENT, "s1", _outgoing(f"message {n}", NOW + n))
    with pytest.raises(AgentError, match=r"3 messages already wait .*max_undelivered"):
        box.add(AGENT, "s1", _outgoing("one too many", NOW + 9))
    assert [w.message.text for w in box.waiting(AGENT)] == ["message 0", "message 1", "message 2"]
