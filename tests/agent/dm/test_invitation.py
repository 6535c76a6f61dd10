"""Invitations (agent/dm/invitation.py): what the data dir keeps of one, and when it is taken. Single use, expiring,
never stored as the secret, taken only under the admin it was made for, and the fingerprint both sides compute."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, NOW, OTHER_KEY

from didactyl_tui.agent.dm.invitation import (
    INVITATION_TAG,
    fingerprint,
    invitation_of,
    invitation_path,
    issue,
    read_invitation,
    redeem,
)
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.nip17 import make_message

ADMIN, OTHER, AGENT = ADMIN_KEY.public_key_hex, OTHER_KEY.public_key_hex, AGENT_KEY.public_key_hex


def test_an_invitation_is_kept_as_its_digest_in_a_private_file_and_taken_once(tmp_path: Path) -> None:
    secret, made = issue(tmp_path, ttl_s=600, admin_then=None, now=NOW)
    path = invitation_path(tmp_path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert secret not in path.read_text() and len(secret) == 32  # 128 bits, shown once, kept as its SHA-256
    assert read_invitation(tmp_path) == made and made.expires_at == NOW + 600

    assert redeem(tmp_path, secret, sender=ADMIN, admin_now=None, now=NOW + 1).ok
    kept = json.loads(path.read_text())
    assert (kept["used_at"], kept["used_by"]) == (NOW + 1, ADMIN)
    again = redeem(tmp_path, secret, sender=OTHER, admin_now=None, now=NOW + 2)  # the same secret, by another
    assert not again.ok and "used already" in again.reason
    assert redeem(tmp_path, secret, sender=ADMIN, admin_now=None, now=NOW + 2).reason == again.reason


@pytest.mark.parametrize("presented", ["", "x", "0" * 32, "A" * 32, "f" * 33, "secret' OR 1=1", "é" * 32])
def test_a_wrong_invitation_is_refused_alike_and_leaves_the_right_one_open(tmp_path: Path, presented: str) -> None:
    secret, _ = issue(tmp_path, ttl_s=600, admin_then=None, now=NOW)
    wrong = redeem(tmp_path, presented, sender=OTHER, admin_now=None, now=NOW)
    assert not wrong.ok and "not the agent's open one" in wrong.reason  # says nothing of what is open
    assert redeem(tmp_path, secret, sender=ADMIN, admin_now=None, now=NOW).ok


def test_an_expired_invitation_or_one_made_under_another_admin_is_refused(tmp_path: Path) -> None:
    secret, _ = issue(tmp_path, ttl_s=60, admin_then=None, now=NOW)
    late = redeem(tmp_path, secret, sender=ADMIN, admin_now=None, now=NOW + 60)
    assert not late.ok and "expired" in late.reason
    # Printed while nobody was paired; the admin was set since (by hand): it never replaces them.
    secret, _ = issue(tmp_path, ttl_s=600, admin_then=None, now=NOW)
    stale = redeem(tmp_path, secret, sender=OTHER, admin_now=ADMIN, now=NOW + 1)
    assert not stale.ok and "paired with another key" in stale.reason
    # One made under the admin in place (didactyl invite) replaces them when used.
    secret, _ = issue(tmp_path, ttl_s=600, admin_then=ADMIN, now=NOW)
    assert redeem(tmp_path, secret, sender=OTHER, admin_now=ADMIN, now=NOW + 1).ok


def test_a_new_invitation_replaces_the_open_one(tmp_path: Path) -> None:
    first, _ = issue(tmp_path, ttl_s=600, admin_then=None, now=NOW)
    second, _ = issue(tmp_path, ttl_s=600, admin_then=None, now=NOW)
    assert not redeem(tmp_path, first, sender=ADMIN, admin_now=None, now=NOW).ok
    assert redeem(tmp_path, second, sender=ADMIN, admin_now=None, now=NOW).ok


def test_an_invitation_file_others_can_read_or_a_link_is_not_trusted(tmp_path: Path) -> None:
    secret, _ = issue(tmp_path, ttl_s=600, admin_then=None, now=NOW)
    path = invitation_path(tmp_path)
    os.chmod(path, 0o644)
    with pytest.raises(AgentError, match="not a private file"):
        redeem(tmp_path, secret, sender=ADMIN, admin_now=None, now=NOW)
    elsewhere = tmp_path / "elsewhere.json"
    os.chmod(path, 0o600)
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    with pytest.raises(AgentError, match="cannot be read"):
        read_invitation(tmp_path)


def test_the_fingerprint_is_the_pairs_and_the_invitation_travels_in_the_sealed_rumor() -> None:
    mark = fingerprint(AGENT, ADMIN)
    assert mark == fingerprint(AGENT.upper(), ADMIN) and len(mark) == 14 and mark.count("-") == 2
    assert fingerprint(AGENT, OTHER) != mark and fingerprint(ADMIN, AGENT) != mark
    rumor = make_message(ADMIN, [AGENT], "pair", created_at=NOW, extra_tags=[(INVITATION_TAG, "ab" * 16)])
    assert invitation_of(rumor) == "ab" * 16 and ("p", AGENT) in rumor.tags
    long = make_message(ADMIN, [AGENT], "pair", created_at=NOW, extra_tags=[(INVITATION_TAG, "a" * 10_000)])
    assert invitation_of(long) == "a" * 256  # bounded before anything is done with it
    assert invitation_of(make_message(ADMIN, [AGENT], "hi", created_at=NOW)) is None
