"""The embedded relay on its own: persistence, NIP-11, limits, malformed input, NIP-42, the store
against a brute-force model, a locked database, and ``serve_forever``'s start and stop.

Raw websockets here (not our client), so the tests see exactly what the relay sends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs, free_port
from websockets.exceptions import ConnectionClosed

from didactyl_tui.nostr.embedded_relay.foreground import serve_forever
from didactyl_tui.nostr.embedded_relay.limits import RelayLimits
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.embedded_relay.store import EventStore, SaveResult
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.filters import matches
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.relay import RelayClient
from didactyl_tui.nostr.replaceable import resolve
from didactyl_tui.nostr.results import Verdict

T0 = 1_700_000_000
SK = SecretKey.from_hex("00" * 31 + "41")


def note(content: str, *, kind: int = 1, created_at: int = T0, tags: list[list[str]] | None = None) -> Event:
    return sign_event(SK, kind=kind, content=content, created_at=created_at, tags=tags or [])


class Raw:
    """A bare websocket to the relay: send lists, read parsed messages."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws

    async def send(self, message: Any) -> None:
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))

    async def recv(self, timeout: float = 3.0) -> list[Any]:
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    async def ask(self, message: Any) -> list[Any]:
        await self.send(message)
        return await self.recv()

    async def silent(self, timeout: float = 0.1) -> bool:
        try:
            await asyncio.wait_for(self.ws.recv(), timeout)
        except TimeoutError:
            return True
        return False


async def raw(url: str, **kwargs: Any) -> Raw:
    return Raw(await websockets.connect(url, max_size=None, **kwargs))


async def test_events_survive_a_restart_on_the_same_port_and_db(tmp_path: Path) -> None:
    relay = EmbeddedRelayUnderTest(tmp_path / "persist.db")
    await relay.start()
    port = relay.port
    ev = note("remember me")
    async with RelayClient(relay.url, **fast_client_kwargs()) as client:
        assert (await client.publish(ev, timeout=3)).accepted
    await relay.restart()
    assert relay.port == port
    try:
        async with RelayClient(relay.url, **fast_client_kwargs()) as client:
            assert [e.id for e in await client.query([{"ids": [ev.id]}], timeout=3)] == [ev.id]
        with sqlite3.connect(tmp_path / "persist.db") as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        await relay.stop()


def _http_get(url: str, accept: str | None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
    with opener.open(request, timeout=3) as response:
        return response.status, dict(response.headers), response.read()


async def test_nip11_information_document_over_http_on_the_same_port(tmp_path: Path) -> None:
    limits = RelayLimits(max_frame_bytes=10_000, max_subscriptions=7)
    async with EmbeddedRelay(tmp_path / "r.db", limits=limits) as relay:
        http_url = relay.url.replace("ws://", "http://")
        status, headers, body = await asyncio.to_thread(_http_get, http_url, "application/nostr+json")
        assert status == 200
        assert headers["Content-Type"] == "application/nostr+json"
        assert headers["Access-Control-Allow-Origin"] == "*"
        doc = json.loads(body)
        assert doc["name"] == "didactyl embedded relay"
        assert doc["supported_nips"] == [1, 11]
        assert doc["limitation"]["max_message_length"] == 10_000
        assert doc["limitation"]["max_subscriptions"] == 7
        assert doc["limitation"]["auth_required"] is False
        # A browser without the header gets a readable hint, not a handshake error.
        status, headers, body = await asyncio.to_thread(_http_get, http_url, None)
        assert status == 200 and b"Nostr client" in body
        # And the websocket still works on the same port.
        conn = await raw(relay.url)
        assert (await conn.ask(["REQ", "s", {"kinds": [1]}])) == ["EOSE", "s"]


async def test_frame_size_limit_is_answered_clearly(tmp_path: Path) -> None:
    limit = 4096
    async with EmbeddedRelay(tmp_path / "r.db", limits=RelayLimits(max_frame_bytes=limit)) as relay:
        conn = await raw(relay.url)
        big = note("x" * limit)
        answer = await conn.ask(["EVENT", big.to_dict()])
        assert answer[:3] == ["OK", big.id, False]
        assert answer[3].startswith("invalid: message of ") and f"limit of {limit} bytes" in answer[3]
        kind, text = await conn.ask(["REQ", "s", {"kinds": [1], "#t": ["y" * limit]}])
        assert kind == "NOTICE" and text.startswith("invalid: message of ")
        # Still connected and working.
        assert (await conn.ask(["EVENT", note("small").to_dict()]))[2] is True
        # Beyond twice the limit, websockets itself closes the connection: 1009 message too big.
        await conn.send(["EVENT", note("z" * (3 * limit)).to_dict()])
        with pytest.raises(ConnectionClosed) as closed:
            await conn.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        assert await relay.count() == 1


async def test_subscription_limit_per_connection(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "r.db", limits=RelayLimits(max_subscriptions=2)) as relay:
        conn = await raw(relay.url)
        assert await conn.ask(["REQ", "a", {"kinds": [1]}]) == ["EOSE", "a"]
        assert await conn.ask(["REQ", "b", {"kinds": [1]}]) == ["EOSE", "b"]
        assert await conn.ask(["REQ", "b", {"kinds": [2]}]) == ["EOSE", "b"]  # same id replaces
        assert await conn.ask(["REQ", "c", {"kinds": [1]}]) == [
            "CLOSED", "c", "error: too many open subscriptions (limit 2); close one first",
        ]
        await conn.send(["CLOSE", "a"])
        assert await conn.ask(["REQ", "c", {"kinds": [1]}]) == ["EOSE", "c"]
        other = await raw(relay.url)  # the limit is per connection
        assert await other.ask(["REQ", "a", {"kinds": [1]}]) == ["EOSE", "a"]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("not json at all", ["NOTICE", "invalid: message is not valid JSON"]),
        ('{"EVENT": 1}', ["NOTICE", "invalid: a message must be a JSON array that starts with its type"]),
        ("[]", ["NOTICE", "invalid: a message must be a JSON array that starts with its type"]),
        ('["HELLO"]', ["NOTICE", "invalid: unsupported message type 'HELLO'"]),
        ('["EVENT"]', ["NOTICE", "invalid: EVENT needs exactly one event object"]),
        ('["EVENT", {"id": 5}]', ["NOTICE", "invalid: event is missing the field 'pubkey'"]),
        ('["EVENT", {"id": "ab", "pubkey": "", "sig": "", "created_at": 0, "kind": 1, "tags": [], "content": ""}]',
         ["OK", "ab", False, "invalid: event id must be 64 lowercase hex characters"]),
        ('["CLOSE"]', ["NOTICE", "invalid: CLOSE needs exactly one subscription id"]),
        ('["REQ", "s"]', ["NOTICE", "invalid: REQ needs a subscription id and at least one filter"]),
        ('["REQ", "s", {"kinds": "1"}]', ["CLOSED", "s", "invalid: filter 'kinds' must be a list of integers"]),
        ('["REQ", "s", {"#tag": ["x"]}]', ["CLOSED", "s", "invalid: unknown filter key '#tag'"]),
        ('["REQ", "s", {"search": "x"}]', ["CLOSED", "s", "invalid: this relay does not support NIP-50 search"]),
        ('["REQ", "' + "s" * 65 + '", {}]',
         ["CLOSED", "s" * 65, "invalid: subscription id must be 1 to 64 characters"]),
        ('["REQ", "s", ' + ", ".join(["{}"] * 17) + "]", ["CLOSED", "s", "invalid: too many filters (limit 16)"]),
        ('["REQ", "s", {"kinds": [' + ",".join(["1"] * 1001) + "]}]",
         ["CLOSED", "s", "invalid: filter 'kinds' has more than 1000 values"]),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
async def test_malformed_messages_get_a_clear_answer_and_the_connection_survives(
    embedded_relay: EmbeddedRelay, message: str, expected: list[Any]
) -> None:
    conn = await raw(embedded_relay.url)
    assert await conn.ask(message) == expected
    assert (await conn.ask(["EVENT", note("still here").to_dict()]))[2] is True


async def test_auth_events_are_refused_in_event_messages(embedded_relay: EmbeddedRelay) -> None:
    conn = await raw(embedded_relay.url)
    auth = note("", kind=22242, created_at=int(time.time()), tags=[["relay", embedded_relay.url]])
    assert await conn.ask(["EVENT", auth.to_dict()]) == [
        "OK", auth.id, False, "invalid: kind 22242 is only accepted in an AUTH message",
    ]
    assert await embedded_relay.count() == 0


async def test_events_dated_too_far_ahead_are_refused(embedded_relay: EmbeddedRelay) -> None:
    conn = await raw(embedded_relay.url)
    soon = note("soon", created_at=int(time.time()) + 60)
    assert (await conn.ask(["EVENT", soon.to_dict()]))[2] is True
    later = note("later", created_at=int(time.time()) + 3600)
    assert await conn.ask(["EVENT", later.to_dict()]) == [
        "OK", later.id, False, "invalid: created_at is more than 15 minutes in the future",
    ]


async def test_close_stops_live_delivery_and_req_replaces_filters(embedded_relay: EmbeddedRelay) -> None:
    listener, publisher = await raw(embedded_relay.url), await raw(embedded_relay.url)
    assert await listener.ask(["REQ", "s", {"kinds": [1]}]) == ["EOSE", "s"]
    one = note("one")
    assert (await publisher.ask(["EVENT", one.to_dict()]))[2] is True
    assert await listener.recv() == ["EVENT", "s", one.to_dict()]
    assert await listener.ask(["REQ", "s", {"kinds": [7]}]) == ["EOSE", "s"]  # now kind 7 only
    assert (await publisher.ask(["EVENT", note("two", created_at=T0 + 1).to_dict()]))[2] is True
    assert await listener.silent()
    await listener.send(["CLOSE", "s"])
    assert (await publisher.ask(["EVENT", note("r", kind=7).to_dict()]))[2] is True
    assert await listener.silent()


async def test_a_locked_database_gives_a_clear_ok_false(tmp_path: Path) -> None:
    db_path = tmp_path / "locked.db"
    async with EmbeddedRelay(db_path, db_busy_timeout=0.1) as relay:
        conn = await raw(relay.url)
        other = sqlite3.connect(db_path, isolation_level=None)  # another process would do the same
        other.execute("BEGIN IMMEDIATE")
        try:
            ev = note("blocked")
            answer = await conn.ask(["EVENT", ev.to_dict()])
            assert answer[:3] == ["OK", ev.id, False]
            assert answer[3] == "error: could not store the event (database is locked)"
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert (await conn.ask(["EVENT", ev.to_dict()]))[2] is True


# --- NIP-42 ----------------------------------------------------------------------------------

def auth_event(challenge: str, relay_url: str, *, kind: int = 22242, created_at: int | None = None,
               sk: SecretKey = SK) -> Event:
    return sign_event(sk, kind=kind, content="", created_at=created_at or int(time.time()),
                      tags=[["relay", relay_url], ["challenge", challenge]])


async def test_nip42_relay_side(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "auth.db", require_auth=True) as relay:
        conn = await raw(relay.url)
        kind, challenge = await conn.recv()
        assert kind == "AUTH" and len(challenge) >= 16
        ev = note("hello")
        assert await conn.ask(["EVENT", ev.to_dict()]) == [
            "OK", ev.id, False, "auth-required: this relay accepts events from authenticated clients",
        ]
        assert await conn.ask(["REQ", "s", {}]) == [
            "CLOSED", "s", "auth-required: this relay serves authenticated clients only",
        ]
        bad_cases = {
            "the challenge tag does not match the challenge this relay sent": auth_event("nope", relay.url),
            "the relay tag does not name this relay": auth_event(challenge, "ws://127.0.0.1:1"),
            "an AUTH event must be kind 22242": auth_event(challenge, relay.url, kind=22243),
            "created_at is too far from the current time": auth_event(challenge, relay.url, created_at=T0),
        }
        for reason, bad in bad_cases.items():
            assert await conn.ask(["AUTH", bad.to_dict()]) == ["OK", bad.id, False, f"invalid: {reason}"]
        good = auth_event(challenge, relay.url.replace("127.0.0.1", "localhost"))
        forged = good.to_dict() | {"sig": bad_cases[reason].sig}
        assert await conn.ask(["AUTH", forged]) == ["OK", good.id, False, "invalid: bad signature"]
        assert await conn.ask(["AUTH", good.to_dict()]) == ["OK", good.id, True, ""]
        assert await conn.ask(["EVENT", ev.to_dict()]) == ["OK", ev.id, True, ""]
        assert (await conn.ask(["REQ", "s", {}]))[:2] == ["EVENT", "s"]
        # Another connection gets its own challenge and is not authenticated.
        other = await raw(relay.url)
        kind, other_challenge = await other.recv()
        assert other_challenge != challenge
        assert (await other.ask(["EVENT", ev.to_dict()]))[3].startswith("auth-required:")
        _, _, body = await asyncio.to_thread(
            _http_get, relay.url.replace("ws://", "http://"), "application/nostr+json"
        )
        doc = json.loads(body)
        assert 42 in doc["supported_nips"] and doc["limitation"]["auth_required"] is True


# --- the store against a brute-force model -------------------------------------------------

PUBKEYS = ["aa" * 32, "bb" * 32, "cc" * 32]
KINDS = [1, 7, 0, 10002, 30078, 30079]

fake_events = st.builds(
    lambda n, pubkey, kind, t, tags: Event(
        f"{n:064x}", pubkey, T0 + t, kind, tuple(tuple(tag) for tag in tags), "", "00" * 64
    ),
    st.integers(0, 2**32),
    st.sampled_from(PUBKEYS),
    st.sampled_from(KINDS),
    st.integers(0, 5),
    st.lists(st.tuples(st.sampled_from(["d", "t", "p", "tt"]), st.sampled_from(["x", "y", ""])), max_size=3),
)

filters_strategy = st.fixed_dictionaries(
    {},
    optional={
        "authors": st.lists(st.sampled_from(PUBKEYS), max_size=2),
        "kinds": st.lists(st.sampled_from(KINDS), max_size=3),
        "#t": st.lists(st.sampled_from(["x", "y", ""]), max_size=2),
        "#d": st.lists(st.sampled_from(["x", "y", ""]), max_size=2),
        "since": st.integers(T0, T0 + 5),
        "until": st.integers(T0, T0 + 5),
        "limit": st.integers(0, 6),
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(fake_events, max_size=25, unique_by=lambda e: e.id), flt=filters_strategy)
def test_store_matches_a_brute_force_model(events: list[Event], flt: dict[str, Any]) -> None:
    store = EventStore(Path(":memory:"))
    try:
        for ev in events:
            store.save(ev)  # fake signatures: the store trusts its caller (the server verifies)
        # What must be stored: one copy per id, the current version per address (NIP-01).
        held = resolve(events)
        assert sorted(e.id for e in store.query([{}])) == sorted(e.id for e in held)
        expected = sorted((e for e in held if matches(flt, e)), key=lambda e: (-e.created_at, e.id))
        if "limit" in flt:
            expected = expected[: flt["limit"]]
        assert [e.id for e in store.query([flt])] == [e.id for e in expected]
    finally:
        store.close()


def test_store_save_results(tmp_path: Path) -> None:
    store = EventStore(tmp_path / "s.db")
    v1 = note("v1", kind=30078, tags=[["d", "m"]])
    v2 = note("v2", kind=30078, created_at=T0 + 1, tags=[["d", "m"]])
    assert store.save(v1).result is SaveResult.STORED
    assert store.save(v1).result is SaveResult.DUPLICATE
    outcome = store.save(v2)
    assert outcome.result is SaveResult.STORED and outcome.removed_ids == (v1.id,)
    assert store.save(v1).result is SaveResult.SUPERSEDED
    assert store.get(v2.id) == v2 and store.get(v1.id) is None and store.count() == 1
    with pytest.raises(ValueError):
        store.save(note("e", kind=20000))
    store.close()


# --- serve_forever -------------------------------------------------------------------------

async def test_serve_forever_prints_its_url_and_stops_when_cancelled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    task = asyncio.create_task(serve_forever("127.0.0.1", port, tmp_path / "fg.db"))
    url = f"ws://127.0.0.1:{port}"
    for _ in range(200):
        await asyncio.sleep(0.01)
        if url in capsys.readouterr().out:
            break
    else:
        pytest.fail("serve_forever did not print its URL")
    async with RelayClient(url, **fast_client_kwargs()) as client:
        assert (await client.publish(note("hi"), timeout=3)).verdict is Verdict.ACCEPTED
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(OSError):
        await websockets.connect(url, open_timeout=1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_forever_stops_cleanly_on_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    code = (
        "import asyncio, sys; from pathlib import Path; "
        "from didactyl_tui.nostr.embedded_relay.foreground import serve_forever; "
        f"asyncio.run(serve_forever('127.0.0.1', {port}, Path(sys.argv[1])))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "sig.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"ws://127.0.0.1:{port}"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert (tmp_path / "sig.db").exists()
