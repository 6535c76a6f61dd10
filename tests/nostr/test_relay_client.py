"""RelayClient against hostile and broken relays (real websockets servers written in the tests),
and NIP-42 against our embedded relay with ``require_auth=True``.

Whatever a relay sends, the client must not crash: bad frames and bad events are dropped and
counted by reason, and only verified events that match the subscription reach the caller.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections import Counter
from pathlib import Path

import pytest
from relay_servers import ScriptedConnection, ScriptedRelay, eventually, fast_client_kwargs, free_port

from didactyl_tui.errors import NostrError, RelayError
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.relay import RelayClient
from didactyl_tui.nostr.results import ConnectionState, Verdict

T0 = 1_700_000_000
SK = SecretKey.from_hex("00" * 31 + "21")
OTHER = SecretKey.from_hex("00" * 31 + "22")


def note(content: str, *, kind: int = 1, created_at: int = T0, sk: SecretKey = SK) -> Event:
    return sign_event(sk, kind=kind, content=content, created_at=created_at)


# --- hostile frames ------------------------------------------------------------------------

async def test_hostile_frames_are_dropped_counted_and_never_crash() -> None:
    good = note("good")
    wrong_id = dataclasses.replace(note("original"), content="tampered")
    wrong_sig = dataclasses.replace(note("mine"), sig=note("another").sig)
    other_author = note("not what I asked for", sk=OTHER)
    from_the_future = note("later", created_at=int(time.time()) + 3600)
    limit = 4096

    async def script(conn: ScriptedConnection) -> None:
        req = await conn.recv_type("REQ")
        sub = req[1]

        def ev(e: Event | dict, sub_id: str = sub) -> str:
            return json.dumps(["EVENT", sub_id, e.to_dict() if isinstance(e, Event) else e])

        for frame in [
            "this is not json {",
            '["EVENT","' + sub + '",{"id":',  # truncated
            '{"not": "a list"}',
            "[]",
            '["WHAT","is this"]',
            '["OK"]',
            ev(good, "nobody-asked"),
            ev({"id": "zz", "content": 5}),
            ev(wrong_id),
            ev(wrong_sig),
            ev(other_author),
            ev(from_the_future),
            json.dumps(["NOTICE", "x" * (limit + 100)]),  # over the limit, under the hard cap
            ev(good),
            ev(good),  # a repeat is not delivered twice (and is not an attack: not counted)
            json.dumps(["EOSE", sub]),
        ]:
            await conn.send_raw(frame)
        await conn.drain()

    async with ScriptedRelay(script) as relay:
        client = RelayClient(relay.url, max_frame_bytes=limit, **fast_client_kwargs())
        got: list[Event] = []
        eose = asyncio.Event()
        await client.connect(timeout=3)
        client.subscribe([{"authors": [SK.public_key_hex]}], got.append, on_eose=eose.set)
        await asyncio.wait_for(eose.wait(), 3)
        assert [e.id for e in got] == [good.id]
        assert client.dropped == Counter({
            "bad_json": 2,
            "bad_message": 3,
            "unknown_message": 1,
            "unknown_sub": 1,
            "bad_event": 1,
            "invalid_id": 1,
            "invalid_sig": 1,
            "filter_mismatch": 1,
            "future_created_at": 1,
            "oversized": 1,
        })
        assert client.connected and relay.connections == 1
        await client.close()


async def test_frame_beyond_the_hard_cap_closes_the_connection_then_reconnects() -> None:
    limit = 2048

    async def script(conn: ScriptedConnection) -> None:
        req = await conn.recv_type("REQ")
        if conn.index == 0:
            await conn.send_raw(json.dumps(["NOTICE", "y" * (3 * limit)]))
        await conn.send(["EOSE", req[1]])
        await conn.drain()

    async with ScriptedRelay(script) as relay:
        client = RelayClient(relay.url, max_frame_bytes=limit, **fast_client_kwargs())
        eose = asyncio.Event()
        await client.connect(timeout=3)
        client.subscribe([{"kinds": [1]}], lambda ev: None, on_eose=eose.set)
        await asyncio.wait_for(eose.wait(), 5)
        assert relay.connections == 2  # re-subscribed on the new connection
        assert client.dropped["oversized"] == 1
        await client.close()


async def test_binary_and_text_frames_are_read_alike() -> None:
    good = note("binary")

    async def script(conn: ScriptedConnection) -> None:
        req = await conn.recv_type("REQ")
        await conn.send_raw(json.dumps(["EVENT", req[1], good.to_dict()]).encode())
        await conn.send_raw(b"\xff\xfe not utf-8")
        await conn.send(["EOSE", req[1]])
        await conn.drain()

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, **fast_client_kwargs()) as client:
        result = await client.query_result([{"kinds": [1]}], timeout=3)
        assert result.complete and [e.id for e in result.events] == [good.id]
        assert client.dropped == Counter({"bad_json": 1})


async def test_a_query_with_a_byte_bound_ends_there_with_the_newest_events() -> None:
    # A relay that sends 50 events of ~10 kB each: read with a bound of ~5 of them, the answer is the first (newest)
    # events that fit, marked cut, and the rest of the relay's answer is not waited for.
    events = [note("x" * 10_000 + str(i), created_at=T0 - i) for i in range(50)]

    async def script(conn: ScriptedConnection) -> None:
        sub_id = (await conn.recv_type("REQ"))[1]
        for ev in events:
            await conn.send(["EVENT", sub_id, ev.to_dict()])
        await conn.drain()  # never EOSE: only the bound ends the query before its timeout

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, **fast_client_kwargs()) as client:
        result = await client.query_result([{"kinds": [1]}], timeout=60, max_bytes=5 * 10_500)
    assert result.cut and not result.complete and "cut at 52,500 bytes" in result.reason
    assert [e.id for e in result.events] == [e.id for e in events[:len(result.events)]]
    assert 1 <= len(result.events) <= 5


async def test_closed_by_the_relay_ends_the_subscription_with_its_reason() -> None:
    async def script(conn: ScriptedConnection) -> None:
        while True:
            req = await conn.recv_type("REQ")
            await conn.send(["CLOSED", req[1], "error: shutting down idle subscription"])

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, **fast_client_kwargs()) as client:
        reasons: list[str] = []
        sub = client.subscribe([{"kinds": [1]}], lambda ev: None, on_closed=reasons.append)
        assert await eventually(lambda: reasons == ["error: shutting down idle subscription"], 3)
        assert not sub.active and sub.closed_reason == reasons[0]
        result = await client.query_result([{"kinds": [1]}], timeout=3)
        assert not result.complete
        assert result.reason == "closed by the relay: error: shutting down idle subscription"
        assert client.connected


async def test_a_failing_callback_does_not_break_the_connection() -> None:
    first, second = note("one"), note("two", created_at=T0 + 1)

    async def script(conn: ScriptedConnection) -> None:
        req = await conn.recv_type("REQ")
        for ev in (first, second):
            await conn.send(["EVENT", req[1], ev.to_dict()])
        await conn.send(["EOSE", req[1]])
        await conn.drain()

    seen: list[str] = []

    def explode(ev: Event) -> None:
        seen.append(ev.content)
        raise RuntimeError("consumer bug")

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, **fast_client_kwargs()) as client:
        eose = asyncio.Event()
        client.subscribe([{"kinds": [1]}], explode, on_eose=eose.set)
        await asyncio.wait_for(eose.wait(), 3)
        assert seen == ["one", "two"] and client.connected


# --- publish -------------------------------------------------------------------------------

async def answer_every_event(conn: ScriptedConnection, accepted: bool, reason: str) -> None:
    while True:
        msg = await conn.recv_type("EVENT")
        await conn.send(["OK", msg[1]["id"], accepted, reason])


@pytest.mark.parametrize(
    ("accepted", "reason", "verdict"),
    [
        (True, "", Verdict.ACCEPTED),
        (False, "blocked: not on the list", Verdict.REJECTED),
        (False, "rate-limited: slow down", Verdict.REJECTED),
        # The relay holds the event already: that is what a publisher wants to know.
        (False, "duplicate: already have it", Verdict.ACCEPTED),
    ],
)
async def test_publish_returns_the_relays_verdict_and_reason(accepted: bool, reason: str, verdict: Verdict) -> None:
    async def script(conn: ScriptedConnection) -> None:
        await answer_every_event(conn, accepted, reason)

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, **fast_client_kwargs()) as client:
        result = await client.publish(note("x"), timeout=3)
        assert (result.verdict, result.message, result.url) == (verdict, reason, relay.url)


async def test_publish_to_a_relay_that_never_answers_times_out() -> None:
    async def script(conn: ScriptedConnection) -> None:
        await conn.drain()

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, **fast_client_kwargs()) as client:
        ev = note("into the void")
        result = await client.publish(ev, timeout=0.2)
        assert result.verdict is Verdict.TIMEOUT
        assert result.message == "no OK within 0.2s"
        assert relay.messages("EVENT") == [["EVENT", ev.to_dict()]]


async def test_publish_not_connected() -> None:
    never_started = RelayClient("ws://127.0.0.1:9", **fast_client_kwargs())
    result = await never_started.publish(note("x"), timeout=1)
    assert result.verdict is Verdict.NOT_CONNECTED

    dead = RelayClient(f"ws://127.0.0.1:{free_port()}", **fast_client_kwargs(backoff_base=5, backoff_max=5))
    with pytest.raises(RelayError, match="connection refused"):
        await dead.connect(timeout=2)
    assert dead.state is ConnectionState.BACKOFF
    # A relay that is down answers at once instead of holding the caller for the timeout.
    result = await asyncio.wait_for(dead.publish(note("x"), timeout=30), 2)
    assert (result.verdict, result.message) == (Verdict.NOT_CONNECTED, "connection refused")
    query = await asyncio.wait_for(dead.query_result([{"kinds": [1]}], timeout=30), 2)
    assert not query.complete and query.reason.startswith("not connected")
    await dead.close()


async def test_publish_is_resent_after_the_connection_drops_before_ok() -> None:
    async def script(conn: ScriptedConnection) -> None:
        msg = await conn.recv_type("EVENT")
        if conn.index == 0:
            return  # hang up without answering: the relay "died" mid-publish
        await conn.send(["OK", msg[1]["id"], True, ""])
        await conn.drain()

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, **fast_client_kwargs()) as client:
        ev = note("keep me")
        result = await client.publish(ev, timeout=5)
        assert result.verdict is Verdict.ACCEPTED
        assert relay.connections == 2
        assert len(relay.messages("EVENT")) == 2


async def test_same_event_published_concurrently_is_sent_once() -> None:
    release = asyncio.Event()

    async def script(conn: ScriptedConnection) -> None:
        msg = await conn.recv_type("EVENT")
        await release.wait()
        await conn.send(["OK", msg[1]["id"], True, ""])
        await conn.drain()

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, **fast_client_kwargs()) as client:
        ev = note("once")
        tasks = [asyncio.create_task(client.publish(ev, timeout=3)) for _ in range(3)]
        # The relay has the first EVENT (and holds its OK): all three publishes have started by then.
        assert await eventually(lambda: relay.messages("EVENT"), 3)
        release.set()
        results = await asyncio.gather(*tasks)
        assert all(r.verdict is Verdict.ACCEPTED for r in results)
        assert len(relay.messages("EVENT")) == 1


async def test_closing_the_client_answers_a_waiting_publish() -> None:
    async def script(conn: ScriptedConnection) -> None:
        await conn.drain()

    async with ScriptedRelay(script) as relay:
        client = RelayClient(relay.url, **fast_client_kwargs())
        await client.connect(timeout=3)
        pending = asyncio.create_task(client.publish(note("x"), timeout=30))
        assert await eventually(lambda: len(relay.messages("EVENT")) == 1, 3)
        await client.close()
        result = await asyncio.wait_for(pending, 3)
        assert (result.verdict, result.message) == (Verdict.NOT_CONNECTED, "the client was closed")
        assert client.state is ConnectionState.CLOSED


# --- connection lifecycle --------------------------------------------------------------------

async def test_states_and_reconnect_backoff_against_a_relay_that_hangs_up() -> None:
    async def script(conn: ScriptedConnection) -> None:
        return  # accept, then hang up at once

    states: list[ConnectionState] = []
    async with ScriptedRelay(script) as relay:
        client = RelayClient(relay.url, on_state=lambda url, st: states.append(st), **fast_client_kwargs())
        await client.connect(timeout=3)
        assert await eventually(lambda: relay.connections >= 3, 5)
        await client.close()
    assert states[:4] == [
        ConnectionState.CONNECTING,
        ConnectionState.CONNECTED,
        ConnectionState.DISCONNECTED,
        ConnectionState.BACKOFF,
    ]
    assert states[-1] is ConnectionState.CLOSED


async def test_without_reconnect_a_lost_connection_stays_down() -> None:
    async def script(conn: ScriptedConnection) -> None:
        await conn.recv_type("EVENT")  # hang up instead of answering

    async with ScriptedRelay(script) as relay:
        client = RelayClient(relay.url, reconnect=False, **fast_client_kwargs())
        await client.connect(timeout=3)
        result = await client.publish(note("x"), timeout=5)
        assert result.verdict is Verdict.NOT_CONNECTED
        assert result.message.startswith("connection lost")
        await asyncio.sleep(0.1)
        assert client.state is ConnectionState.DISCONNECTED and relay.connections == 1
        await client.close()


def test_the_client_owns_its_parts_and_none_inherits_another() -> None:
    """#33: the client is a facade over parts that keep their own state, not mixins that share one."""
    client = RelayClient("ws://127.0.0.1:9")
    parts = [client.link, client.connection, client.incoming, client.subscriptions, client.publishes, client.auth]
    assert len({type(part) for part in parts}) == len(parts)
    for obj in (client, *parts):
        assert type(obj).__mro__ == (type(obj), object), type(obj).__mro__


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap() -> None:
    client = RelayClient("ws://127.0.0.1:9", backoff_base=0.5, backoff_max=8.0)
    random.seed(7)
    for attempt, ceiling in enumerate([0.5, 1, 2, 4, 8, 8, 8]):
        delays = [client.connection.backoff_delay(attempt) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered
    assert client.connection.backoff_delay(10_000) <= 8.0


async def test_connect_errors_are_relay_errors() -> None:
    with pytest.raises(RelayError, match="not a relay URL"):
        RelayClient("http://example.org")
    client = RelayClient(f"ws://127.0.0.1:{free_port()}", reconnect=False, **fast_client_kwargs())
    with pytest.raises(RelayError, match=r"cannot connect to ws://127\.0\.0\.1:\d+: connection refused"):
        await client.connect(timeout=2)
    assert client.state is ConnectionState.DISCONNECTED
    with pytest.raises(NostrError):
        client.subscribe([{"kinds": "one"}], lambda ev: None)
    await client.close()


# --- NIP-42 ----------------------------------------------------------------------------------

async def test_nip42_publish_authenticates_after_auth_required_and_retries(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "auth.db", require_auth=True) as relay:
        anonymous = RelayClient(relay.url, **fast_client_kwargs())
        await anonymous.connect(timeout=3)
        refused = await anonymous.publish(note("anon"), timeout=3)
        assert refused.verdict is Verdict.REJECTED and refused.message.startswith("auth-required:")
        await anonymous.close()

        client = RelayClient(relay.url, auth_key=SK, **fast_client_kwargs())
        await client.connect(timeout=3)
        assert not client.authenticated  # lazy: only when the relay asks
        ev = note("signed in")
        result = await client.publish(ev, timeout=3)
        assert result.verdict is Verdict.ACCEPTED, result
        assert client.authenticated
        assert [e.id for e in await relay.query([{"ids": [ev.id]}])] == [ev.id]
        await client.close()


async def test_nip42_subscription_closed_auth_required_is_retried_after_auth(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "auth.db", require_auth=True) as relay:
        async with RelayClient(relay.url, auth_key=SK, **fast_client_kwargs()) as writer:
            stored = note("stored")
            assert (await writer.publish(stored, timeout=3)).accepted

        anonymous = RelayClient(relay.url, **fast_client_kwargs())
        await anonymous.connect(timeout=3)
        reasons: list[str] = []
        anonymous.subscribe([{"kinds": [1]}], lambda ev: None, on_closed=reasons.append)
        assert await eventually(lambda: bool(reasons), 3)
        assert reasons[0].startswith("auth-required:")
        await anonymous.close()

        client = RelayClient(relay.url, auth_key=OTHER, **fast_client_kwargs())
        await client.connect(timeout=3)
        result = await client.query_result([{"kinds": [1]}], timeout=3)
        assert result.complete, result.reason
        assert [e.id for e in result.events] == [stored.id]
        await client.close()


async def test_nip42_a_subscription_is_retried_once_per_connection() -> None:
    """auth-required CLOSED: one NIP-42 retry; a second CLOSED on that connection ends it, a new connection
    retries again."""
    async def script(conn: ScriptedConnection) -> None:
        await conn.send(["AUTH", f"challenge-{conn.index}"])
        req = await conn.recv_type("REQ")
        await conn.send(["CLOSED", req[1], "auth-required: sign in"])
        auth = await conn.recv_type("AUTH")
        await conn.send(["OK", auth[1]["id"], True, ""])
        again = await conn.recv_type("REQ")
        if conn.index == 0:
            return  # hang up: the subscription is re-sent on the next connection, with a retry of its own
        await conn.send(["CLOSED", again[1], "auth-required: still not you"])
        await conn.drain()

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, auth_key=SK, **fast_client_kwargs()) as client:
        reasons: list[str] = []
        sub = client.subscribe([{"kinds": [1]}], lambda ev: None, on_closed=reasons.append)
        assert await eventually(lambda: bool(reasons), 10)
        assert reasons == ["auth-required: still not you"] and not sub.active
        assert relay.connections == 2 and len(relay.messages("AUTH")) == 2 and len(relay.messages("REQ")) == 4
        assert client.authenticated


async def test_nip42_relay_that_never_sends_a_challenge() -> None:
    async def script(conn: ScriptedConnection) -> None:
        await answer_every_event(conn, False, "auth-required: sign in first")

    async with ScriptedRelay(script) as relay:
        client = RelayClient(relay.url, auth_key=SK, **fast_client_kwargs())
        await client.connect(timeout=3)
        result = await client.publish(note("x"), timeout=0.3)
        assert result.verdict is Verdict.REJECTED
        assert result.message == (
            "auth-required: sign in first (authentication failed: the relay sent no AUTH challenge)"
        )
        assert relay.messages("AUTH") == []
        await client.close()


async def test_nip42_auth_event_names_relay_and_challenge() -> None:
    async def script(conn: ScriptedConnection) -> None:
        await conn.send(["AUTH", "challenge-123"])
        first = await conn.recv_type("EVENT")
        await conn.send(["OK", first[1]["id"], False, "auth-required: who are you?"])
        auth = await conn.recv_type("AUTH")
        await conn.send(["OK", auth[1]["id"], True, ""])
        again = await conn.recv_type("EVENT")
        await conn.send(["OK", again[1]["id"], True, ""])
        await conn.drain()

    async with ScriptedRelay(script) as relay, RelayClient(relay.url, auth_key=SK, **fast_client_kwargs()) as client:
        result = await client.publish(note("x"), timeout=3)
        assert result.verdict is Verdict.ACCEPTED
        [auth] = relay.messages("AUTH")
        auth_event = Event.from_dict(auth[1])
        assert auth_event.is_valid() and auth_event.kind == 22242
        assert auth_event.pubkey == SK.public_key_hex
        assert auth_event.first_tag("relay") == relay.url
        assert auth_event.first_tag("challenge") == "challenge-123"
        assert abs(auth_event.created_at - time.time()) < 600
