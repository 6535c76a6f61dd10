"""One relay-semantics suite, run against our embedded relay and against rust-nostr's relay.

Every test talks over a real loopback websocket through our RelayClient. Where the two relays
legitimately differ the expectation comes from the relay under test, and names the NIP rule.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from relay_servers import RelayUnderTest, eventually, fast_client_kwargs

from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.relay import RelayClient
from didactyl_tui.nostr.results import ConnectionState, Verdict

T0 = 1_700_000_000  # fixed timestamps: in the past, so no relay treats them as "future"


@pytest.fixture
async def client(any_relay: RelayUnderTest) -> AsyncIterator[RelayClient]:
    c = RelayClient(any_relay.url, **fast_client_kwargs())
    await c.connect(timeout=3)
    try:
        yield c
    finally:
        await c.close()


async def publish_ok(client: RelayClient, ev: Event) -> None:
    verdict = await client.publish(ev, timeout=3)
    assert verdict.verdict is Verdict.ACCEPTED, verdict


async def ids_of(client: RelayClient, filters: list[dict[str, Any]]) -> list[str]:
    result = await client.query_result(filters, timeout=3)
    assert result.complete, result.reason
    return [e.id for e in result.events]


# --- publish / OK --------------------------------------------------------------------------

async def test_publish_gets_ok_true_then_duplicate(client: RelayClient) -> None:
    sk = SecretKey.generate()
    ev = sign_event(sk, kind=1, content="hello", created_at=T0)
    first = await client.publish(ev, timeout=3)
    assert first.verdict is Verdict.ACCEPTED and first.url == client.url
    # NIP-01: a repeat is answered with the "duplicate:" prefix (both relays say OK true).
    again = await client.publish(ev, timeout=3)
    assert again.verdict is Verdict.ACCEPTED
    assert again.message.startswith("duplicate:")
    assert await ids_of(client, [{"ids": [ev.id]}]) == [ev.id]


async def test_bad_signature_is_rejected_invalid_and_not_stored(client: RelayClient) -> None:
    sk = SecretKey.generate()
    good = sign_event(sk, kind=1, content="signed", created_at=T0)
    other = sign_event(sk, kind=1, content="other", created_at=T0)
    forged = dataclasses.replace(good, sig=other.sig)  # a real signature, of another id
    verdict = await client.publish(forged, timeout=3)
    assert verdict.verdict is Verdict.REJECTED
    assert verdict.message.startswith("invalid:")
    assert await ids_of(client, [{"ids": [good.id]}]) == []


async def test_bad_id_is_rejected_invalid_and_not_stored(client: RelayClient) -> None:
    sk = SecretKey.generate()
    good = sign_event(sk, kind=1, content="original", created_at=T0)
    tampered = dataclasses.replace(good, content="tampered")  # id no longer matches the content
    verdict = await client.publish(tampered, timeout=3)
    assert verdict.verdict is Verdict.REJECTED
    assert verdict.message.startswith("invalid:")
    assert await ids_of(client, [{"authors": [sk.public_key_hex]}]) == []


# --- filters -------------------------------------------------------------------------------

ALICE = SecretKey.from_hex("00" * 31 + "0a")
BOB = SecretKey.from_hex("00" * 31 + "0b")


def _corpus() -> dict[str, Event]:
    a = sign_event(ALICE, kind=1, content="a", created_at=T0 + 100,
                   tags=[["t", "x"], ["p", BOB.public_key_hex]])
    b = sign_event(ALICE, kind=7, content="b", created_at=T0 + 200, tags=[["t", "y"]])
    c = sign_event(BOB, kind=1, content="c", created_at=T0 + 300, tags=[["t", "x"], ["e", a.id]])
    d = sign_event(BOB, kind=30023, content="d", created_at=T0 + 400, tags=[["d", "art"], ["t", "z"]])
    return {"a": a, "b": b, "c": c, "d": d}


CORPUS = _corpus()
BOTH = [ALICE.public_key_hex, BOB.public_key_hex]

FILTER_CASES: list[tuple[str, list[dict[str, Any]], str]] = [
    ("ids", [{"ids": [CORPUS["a"].id, CORPUS["c"].id]}], "ca"),
    ("authors", [{"authors": [ALICE.public_key_hex]}], "ba"),
    ("kinds", [{"kinds": [1], "authors": BOTH}], "ca"),
    ("tag t one value", [{"#t": ["x"]}], "ca"),
    ("tag t any of values", [{"#t": ["y", "z"]}], "db"),
    ("tag e", [{"#e": [CORPUS["a"].id]}], "c"),
    ("tag p", [{"#p": [BOB.public_key_hex]}], "a"),
    ("tag d", [{"#d": ["art"]}], "d"),
    ("since", [{"authors": BOTH, "since": T0 + 200}], "dcb"),
    ("until", [{"authors": BOTH, "until": T0 + 200}], "ba"),
    ("since and until", [{"authors": BOTH, "since": T0 + 200, "until": T0 + 300}], "cb"),
    ("all conditions AND", [{"kinds": [1], "#t": ["x"], "authors": [BOB.public_key_hex]}], "c"),
    ("limit keeps the newest", [{"authors": BOTH, "limit": 2}], "dc"),
    ("filters are OR-ed", [{"kinds": [7], "authors": BOTH}, {"#d": ["art"]}], "db"),
    ("no match", [{"kinds": [9999], "authors": BOTH}], ""),
]


@pytest.mark.parametrize(("filters", "expected"), [(f, e) for _, f, e in FILTER_CASES],
                         ids=[name for name, _, _ in FILTER_CASES])
async def test_filters(client: RelayClient, filters: list[dict[str, Any]], expected: str) -> None:
    for ev in CORPUS.values():
        await publish_ok(client, ev)
    assert await ids_of(client, filters) == [CORPUS[name].id for name in expected]


async def test_stored_events_arrive_newest_first_ties_by_lowest_id(client: RelayClient) -> None:
    sk = SecretKey.generate()
    events = [sign_event(sk, kind=1, content=f"n{i}", created_at=T0 + (i // 2)) for i in range(6)]
    for ev in events:
        await publish_ok(client, ev)
    arrived: list[str] = []
    done = asyncio.Event()
    sub = client.subscribe([{"authors": [sk.public_key_hex]}], lambda ev: arrived.append(ev.id),
                           on_eose=done.set)
    await asyncio.wait_for(done.wait(), 3)
    await sub.close()
    # NIP-01: newest first; on equal created_at, the lowest id first.
    expected = sorted(events, key=lambda e: (-e.created_at, e.id))
    assert arrived == [e.id for e in expected]
    # And the limit cut keeps the newest three.
    assert await ids_of(client, [{"authors": [sk.public_key_hex], "limit": 3}]) == [
        e.id for e in expected[:3]
    ]


# --- replaceable and addressable -----------------------------------------------------------

@pytest.mark.parametrize(("kind", "tags"), [(0, []), (10002, []), (30078, [["d", "memo"]])],
                         ids=["kind0", "replaceable-10002", "addressable-30078"])
async def test_newer_version_replaces_older_and_late_older_is_refused(
    client: RelayClient, any_relay: RelayUnderTest, kind: int, tags: list[list[str]]
) -> None:
    sk = SecretKey.generate()
    v1 = sign_event(sk, kind=kind, content="v1", created_at=T0, tags=tags)
    v2 = sign_event(sk, kind=kind, content="v2", created_at=T0 + 1, tags=tags)
    await publish_ok(client, v1)
    await publish_ok(client, v2)
    query = [{"kinds": [kind], "authors": [sk.public_key_hex]}]
    assert await ids_of(client, query) == [v2.id]
    # NIP-01: only the latest version must be kept; the late older one is not stored. NIP-01
    # names no OK prefix for it: ours says "replaced:" (like strfry), rust-nostr "error: unknown".
    late = await client.publish(v1, timeout=3)
    assert late.verdict is Verdict.REJECTED
    assert late.message.startswith(any_relay.outdated_reasons), late.message
    assert await ids_of(client, query) == [v2.id]


async def test_addressable_versions_are_per_kind_author_and_d(client: RelayClient) -> None:
    alice, bob = SecretKey.generate(), SecretKey.generate()
    memo_a = sign_event(alice, kind=30078, content="memo", created_at=T0, tags=[["d", "memo"]])
    soul_a = sign_event(alice, kind=30078, content="soul", created_at=T0, tags=[["d", "soul"]])
    memo_b = sign_event(bob, kind=30078, content="bob memo", created_at=T0, tags=[["d", "memo"]])
    other_kind = sign_event(alice, kind=30079, content="other", created_at=T0, tags=[["d", "memo"]])
    memo_a2 = sign_event(alice, kind=30078, content="memo 2", created_at=T0 + 5, tags=[["d", "memo"]])
    for ev in (memo_a, soul_a, memo_b, other_kind, memo_a2):
        await publish_ok(client, ev)
    got = set(await ids_of(client, [{"authors": [alice.public_key_hex, bob.public_key_hex]}]))
    assert got == {memo_a2.id, soul_a.id, memo_b.id, other_kind.id}


@pytest.mark.parametrize("low_first", [True, False], ids=["low-id-first", "high-id-first"])
@pytest.mark.parametrize(("kind", "tags"), [(10002, []), (30078, [["d", "tie"]])],
                         ids=["replaceable", "addressable"])
async def test_equal_created_at_lowest_id_wins(
    client: RelayClient, any_relay: RelayUnderTest, kind: int, tags: list[list[str]], low_first: bool
) -> None:
    sk = SecretKey.generate()
    x = sign_event(sk, kind=kind, content="x", created_at=T0, tags=tags)
    y = sign_event(sk, kind=kind, content="y", created_at=T0, tags=tags)
    low, high = sorted([x, y], key=lambda e: e.id)
    first, second = (low, high) if low_first else (high, low)
    await publish_ok(client, first)
    verdict = await client.publish(second, timeout=3)
    if second is low:
        assert verdict.verdict is Verdict.ACCEPTED
    else:
        # NIP-01: same created_at, the lowest id is the current version; the higher id loses.
        assert verdict.verdict is Verdict.REJECTED
        assert verdict.message.startswith(any_relay.outdated_reasons), verdict.message
    assert await ids_of(client, [{"kinds": [kind], "authors": [sk.public_key_hex]}]) == [low.id]


# --- live subscriptions --------------------------------------------------------------------

async def test_live_subscription_gets_only_matching_events(
    client: RelayClient, any_relay: RelayUnderTest
) -> None:
    sk = SecretKey.generate()
    got: list[Event] = []
    eose = asyncio.Event()
    sub = client.subscribe([{"authors": [sk.public_key_hex], "kinds": [1]}], got.append, on_eose=eose.set)
    await asyncio.wait_for(eose.wait(), 3)
    async with RelayClient(any_relay.url, **fast_client_kwargs()) as publisher:
        wanted = sign_event(sk, kind=1, content="yes", created_at=T0)
        unwanted = sign_event(sk, kind=7, content="no", created_at=T0)
        await publish_ok(publisher, unwanted)
        await publish_ok(publisher, wanted)
        # The relay sends in order: a wrong delivery (the unwanted one, a duplicate) comes before this marker.
        marker = sign_event(sk, kind=1, content="marker", created_at=T0 + 1)
        await publish_ok(publisher, marker)
        assert await eventually(lambda: len(got) >= 2, 3)
    assert [e.id for e in got] == [wanted.id, marker.id]
    await sub.close()
    assert not sub.active


async def test_ephemeral_event_reaches_live_subscribers_and_is_not_stored(
    client: RelayClient, any_relay: RelayUnderTest
) -> None:
    sk = SecretKey.generate()
    got: list[Event] = []
    eose = asyncio.Event()
    client.subscribe([{"authors": [sk.public_key_hex]}], got.append, on_eose=eose.set)
    await asyncio.wait_for(eose.wait(), 3)
    ephemeral = sign_event(sk, kind=20001, content="now only", created_at=T0)
    async with RelayClient(any_relay.url, **fast_client_kwargs()) as publisher:
        await publish_ok(publisher, ephemeral)
    assert await eventually(lambda: [e.id for e in got] == [ephemeral.id], 3)
    # NIP-01: ephemeral events are not expected to be stored.
    assert await ids_of(client, [{"authors": [sk.public_key_hex]}]) == []


# --- restart -------------------------------------------------------------------------------

async def test_reconnects_and_resubscribes_after_the_relay_restarts(any_relay: RelayUnderTest) -> None:
    sk = SecretKey.generate()
    states: list[ConnectionState] = []
    got: list[Event] = []
    eose_count = 0

    def on_eose() -> None:
        nonlocal eose_count
        eose_count += 1

    client = RelayClient(any_relay.url, on_state=lambda _url, st: states.append(st), **fast_client_kwargs())
    try:
        await client.connect(timeout=3)
        client.subscribe([{"authors": [sk.public_key_hex]}], got.append, on_eose=on_eose)
        assert await eventually(lambda: eose_count == 1, 3)

        await any_relay.restart()
        # The client notices, backs off, reconnects on its own and re-sends the REQ.
        assert await eventually(lambda: eose_count >= 2, 5), states
        assert states.count(ConnectionState.CONNECTED) >= 2
        assert ConnectionState.DISCONNECTED in states

        ev = sign_event(sk, kind=1, content="after restart", created_at=T0)
        async with RelayClient(any_relay.url, **fast_client_kwargs()) as publisher:
            await publish_ok(publisher, ev)
        assert await eventually(lambda: [e.id for e in got] == [ev.id], 3)
        # Publishing through the reconnected client works too.
        await publish_ok(client, sign_event(sk, kind=1, content="me too", created_at=T0 + 1))
        assert await eventually(lambda: len(got) == 2, 3)
    finally:
        await client.close()
    assert client.state is ConnectionState.CLOSED
