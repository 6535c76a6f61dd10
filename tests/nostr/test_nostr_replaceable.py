"""NIP-01 replacement: newest created_at wins, ties go to the lowest id, whatever the arrival order."""

from __future__ import annotations

import hashlib
import sqlite3

from hypothesis import given
from hypothesis import strategies as st

from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.replaceable import (
    address_key,
    address_of,
    is_newer,
    is_newer_version,
    latest_by_address,
    newest,
    newest_first,
    resolve,
    sql_newest_first,
)

ALICE = SecretKey.from_hex("00" * 31 + "03")
BOB = SecretKey.from_hex("00" * 31 + "05")


def _ev(kind: int, created_at: int, *, d: str | None = None, content: str = "", sk: SecretKey = ALICE) -> Event:
    tags = [["d", d]] if d is not None else []
    return sign_event(sk, kind=kind, content=content, created_at=created_at, tags=tags)


def _fake(kind: int, created_at: int, id_hex: str, d: str = "x", pubkey: str = "ab" * 32) -> Event:
    # Unsigned stand-in: resolution never verifies, and a chosen id lets us force ties.
    return Event(id_hex, pubkey, created_at, kind, (("d", d),), "", "00" * 64)


def test_address_of() -> None:
    assert address_of(_ev(1, 1)) is None
    assert address_of(_ev(20001, 1)) is None
    assert address_of(_ev(0, 1, d="ignored")) == (0, ALICE.public_key_hex, "")
    assert address_of(_ev(10002, 1)) == (10002, ALICE.public_key_hex, "")
    assert address_of(_ev(30078, 1, d="memo")) == (30078, ALICE.public_key_hex, "memo")
    assert address_of(_ev(30078, 1)) == (30078, ALICE.public_key_hex, "")


def test_is_newer_and_tie_break() -> None:
    old, new = _fake(30078, 1, "bb" * 32), _fake(30078, 2, "cc" * 32)
    assert is_newer(new, old) and not is_newer(old, new)
    low, high = _fake(30078, 5, "01" * 32), _fake(30078, 5, "02" * 32)
    assert is_newer(low, high) and not is_newer(high, low)
    assert not is_newer(low, low)


def test_newest() -> None:
    assert newest([]) is None
    evs = [_fake(0, 3, "ff" * 32), _fake(0, 3, "0f" * 32), _fake(0, 1, "00" * 32)]
    assert newest(evs) == evs[1]


def test_latest_by_address_separates_addresses() -> None:
    a1, a2 = _ev(30078, 1, d="a"), _ev(30078, 2, d="a")
    b1 = _ev(30078, 1, d="b")
    bob = _ev(30078, 0, d="a", sk=BOB)
    meta_old, meta_new = _ev(0, 1, content="old"), _ev(0, 9, content="new")
    regular = _ev(1, 5)
    out = latest_by_address([a2, b1, regular, a1, meta_new, bob, meta_old])
    assert out == {
        (30078, ALICE.public_key_hex, "a"): a2,
        (30078, ALICE.public_key_hex, "b"): b1,
        (30078, BOB.public_key_hex, "a"): bob,
        (0, ALICE.public_key_hex, ""): meta_new,
    }


def test_resolve_dedupes_and_keeps_regular_events() -> None:
    n1, n2 = _ev(1, 10, content="one"), _ev(1, 20, content="two")
    m_old, m_new = _ev(30078, 5, d="m", content="v1"), _ev(30078, 6, d="m", content="v2")
    eph = _ev(20000, 7)
    out = resolve([n1, m_old, n1, m_new, n2, m_new, eph])
    assert out == [n2, n1, eph, m_new]  # newest first
    assert len({e.id for e in out}) == len(out)


def test_resolve_order_ties_by_id() -> None:
    a, b = _fake(1, 5, "02" * 32), _fake(1, 5, "01" * 32)
    assert resolve([a, b]) == [b, a]


def _hex_id(n: int) -> str:
    return hashlib.sha256(n.to_bytes(4, "big")).hexdigest()


@st.composite
def versions_and_order(draw: st.DrawFn) -> tuple[list[Event], list[Event]]:
    # Several versions of a few addresses, created_at from a tiny range so ties are common.
    count = draw(st.integers(min_value=1, max_value=12))
    seeds = draw(st.lists(st.integers(0, 10**6), min_size=count, max_size=count, unique=True))
    events = [
        _fake(
            draw(st.sampled_from([0, 10002, 30078])),
            draw(st.integers(min_value=0, max_value=3)),
            _hex_id(seed),
            d=draw(st.sampled_from(["a", "b"])),
            pubkey=draw(st.sampled_from(["ab" * 32, "cd" * 32])),
        )
        for seed in seeds
    ]
    arrival = draw(st.permutations(events))
    duplicates = draw(st.lists(st.sampled_from(events), max_size=4))
    return events, list(arrival) + duplicates


@given(versions_and_order())
def test_newest_wins_tie_lowest_id_independent_of_arrival_order(case: tuple[list[Event], list[Event]]) -> None:
    events, arrival = case
    # Oracle, written independently: group by address, take max created_at, then min id.
    groups: dict[tuple[int, str, str], list[Event]] = {}
    for ev in events:
        d = ev.d_tag if ev.kind >= 30000 else ""
        groups.setdefault((ev.kind, ev.pubkey, d), []).append(ev)
    expected = {addr: min(evs, key=lambda e: (-e.created_at, e.id)) for addr, evs in groups.items()}

    assert latest_by_address(arrival) == expected
    assert sorted(resolve(arrival), key=lambda e: e.id) == sorted(expected.values(), key=lambda e: e.id)
    assert resolve(arrival) == resolve(events) == resolve(reversed(arrival))


def test_address_key_names_the_address_or_the_event() -> None:
    note = _ev(1, 5)
    assert address_key(note) == f"event:{note.id}"
    assert address_key(_ev(0, 5)) == f"0:{ALICE.public_key_hex}:"
    assert address_key(_ev(30078, 5, d="short_term_memory")) == f"30078:{ALICE.public_key_hex}:short_term_memory"
    assert address_key(_ev(30078, 5)) == f"30078:{ALICE.public_key_hex}:"  # no d tag is the empty d


@given(versions_and_order())
def test_every_form_of_the_order_agrees(case: tuple[list[Event], list[Event]]) -> None:
    """Pairs, events, sort key and SQL all put the same version first."""
    _, arrival = case
    best = newest(arrival)
    assert best is not None
    assert sorted(arrival, key=newest_first)[0] is best
    for other in arrival:
        assert is_newer(best, other) == (other.id != best.id)
        assert is_newer_version(best.created_at, best.id, other.created_at, other.id) == (other.id != best.id)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE v (event_id TEXT, created_at INTEGER)")
    db.executemany("INSERT INTO v VALUES (?, ?)", [(e.id, e.created_at) for e in arrival])
    order = f"SELECT event_id FROM v ORDER BY {sql_newest_first(id_column='event_id')}"
    assert [r[0] for r in db.execute(order)] == [e.id for e in sorted(arrival, key=newest_first)]
