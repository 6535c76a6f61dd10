"""NIP-01 filters: shape validation and matching."""

from __future__ import annotations

import pytest

from didactyl_tui.errors import NostrError
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.filters import matches, matches_any, validate_filter
from didactyl_tui.nostr.keys import SecretKey

ALICE = SecretKey.from_hex("00" * 31 + "03")
BOB = SecretKey.from_hex("00" * 31 + "05")

EV = sign_event(
    ALICE,
    kind=30078,
    content="memo",
    created_at=1000,
    tags=[["d", "notes"], ["p", BOB.public_key_hex], ["t", "ai"], ["t", "nostr"], ["e"]],
)


@pytest.mark.parametrize(
    "f",
    [
        {},
        {"ids": [EV.id]},
        {"authors": [ALICE.public_key_hex]},
        {"kinds": [1, 30078]},
        {"since": 1000},
        {"until": 1000},
        {"since": 999, "until": 1001},
        {"#d": ["notes"]},
        {"#t": ["other", "nostr"]},
        {"#p": [BOB.public_key_hex], "#t": ["ai"]},
        {"limit": 0},
        {"search": "anything"},
        {"ids": [EV.id], "authors": [ALICE.public_key_hex], "kinds": [30078], "#d": ["notes"]},
    ],
)
def test_matches(f: dict) -> None:
    validate_filter(f)
    assert matches(f, EV)


@pytest.mark.parametrize(
    "f",
    [
        {"ids": []},
        {"ids": ["00" * 32]},
        {"ids": [EV.id[:10]]},  # prefixes are not ids (current NIP-01)
        {"authors": [BOB.public_key_hex]},
        {"kinds": [1]},
        {"kinds": []},
        {"since": 1001},
        {"until": 999},
        {"#d": ["other"]},
        {"#t": ["ai"], "#p": ["00" * 32]},  # tag filters are ANDed
        {"#e": [""]},  # a tag with no value has nothing to match
        {"#x": ["notes"]},
        {"#D": ["notes"]},  # tag names are case-sensitive
        {"ids": [EV.id], "kinds": [1]},  # all conditions must hold
    ],
)
def test_does_not_match(f: dict) -> None:
    validate_filter(f)
    assert not matches(f, EV)


def test_matches_any_is_or_of_filters() -> None:
    assert matches_any([{"kinds": [1]}, {"#t": ["ai"]}], EV)
    assert not matches_any([{"kinds": [1]}, {"#t": ["zzz"]}], EV)
    assert not matches_any([], EV)


def test_tag_match_uses_first_value_only() -> None:
    ev = sign_event(ALICE, kind=1, content="", created_at=1, tags=[["e", "a", "wss://relay", "reply"]])
    assert matches({"#e": ["a"]}, ev)
    assert not matches({"#e": ["wss://relay"]}, ev)


@pytest.mark.parametrize(
    "f, reason",
    [
        ([], "JSON object"),
        ({"ids": "abc"}, "'ids' must be a list"),
        ({"authors": [1]}, "'authors' must be a list"),
        ({"kinds": ["1"]}, "'kinds' must be a list of integers"),
        ({"kinds": [True]}, "'kinds' must be a list of integers"),
        ({"since": -1}, "'since' must be a non-negative integer"),
        ({"until": "1"}, "'until' must be a non-negative integer"),
        ({"limit": False}, "'limit' must be a non-negative integer"),
        ({"#t": "ai"}, "'#t' must be a list of strings"),
        ({"#tt": ["x"]}, "unknown filter key '#tt'"),
        ({"colour": 1}, "unknown filter key 'colour'"),
        ({"search": 3}, "'search' must be a string"),
    ],
)
def test_validate_filter_rejects(f: object, reason: str) -> None:
    with pytest.raises(NostrError, match=reason):
        validate_filter(f)


def test_validate_filter_returns_a_copy() -> None:
    f = {"kinds": [1]}
    out = validate_filter(f)
    assert out == f and out is not f


def test_matching_ignores_signature_validity() -> None:
    # Matching is about content; verification is a separate, earlier step.
    forged = Event(EV.id, EV.pubkey, EV.created_at, EV.kind, EV.tags, EV.content, "00" * 64)
    assert matches({"ids": [EV.id]}, forged)
