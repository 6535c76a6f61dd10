"""RelayPool over real relays: per-relay verdicts, dead and silent relays, merged queries resolved by
NIP-01 across relays that hold different versions, live subscriptions deduped across relays."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from pathlib import Path

from relay_servers import (
    RustRelayUnderTest,
    ScriptedConnection,
    ScriptedRelay,
    eventually,
    fast_client_kwargs,
    free_port,
)

from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.results import ConnectionState, Verdict

T0 = 1_700_000_000
SK = SecretKey.from_hex("00" * 31 + "31")


def memo(content: str, created_at: int, d: str = "memo") -> Event:
    return sign_event(SK, kind=30078, content=content, created_at=created_at, tags=[["d", d]])


async def silent(conn: ScriptedConnection) -> None:
    await conn.drain()  # accepts the websocket, then never answers anything


async def test_publish_gives_one_verdict_per_relay_and_no_relay_holds_the_others(tmp_path: Path) -> None:
    async def refusing(conn: ScriptedConnection) -> None:
        while True:
            msg = await conn.recv_type("EVENT")
            await conn.send(["OK", msg[1]["id"], False, "blocked: not today"])

    dead = f"ws://127.0.0.1:{free_port()}"
    async with (
        EmbeddedRelay(tmp_path / "good.db") as good,
        ScriptedRelay(silent) as quiet,
        ScriptedRelay(refusing) as grumpy,
    ):
        pool = RelayPool([good.url, dead, quiet.url, grumpy.url, good.url], **fast_client_kwargs())
        assert pool.urls == [good.url, dead, quiet.url, grumpy.url]  # duplicates ignored, order kept
        await pool.start()
        assert await eventually(lambda: pool.states() == {
            good.url: ConnectionState.CONNECTED,
            dead: ConnectionState.BACKOFF,
            quiet.url: ConnectionState.CONNECTED,
            grumpy.url: ConnectionState.CONNECTED,
        }, 5), pool.states()
        ev = memo("hello", T0)
        async with asyncio.timeout(5):  # guard: a dead or silent relay must not hold the rest
            outcome = await pool.publish(ev, timeout=0.3)
        assert outcome.event_id == ev.id
        assert {url: r.verdict for url, r in outcome.results.items()} == {
            good.url: Verdict.ACCEPTED,
            dead: Verdict.NOT_CONNECTED,
            quiet.url: Verdict.TIMEOUT,
            grumpy.url: Verdict.REJECTED,
        }
        assert outcome.results[grumpy.url].message == "blocked: not today"
        assert outcome.results[dead].message == "connection refused"
        assert outcome.accepted_by == [good.url] and outcome.any_accepted
        assert outcome.summary().startswith("accepted by 1/4 relays (")

        only_good = await pool.publish(memo("again", T0 + 1), timeout=0.3, urls=[good.url])
        assert list(only_good.results) == [good.url] and only_good.any_accepted
        await pool.close()
        assert set(pool.states().values()) == {ConnectionState.CLOSED}


async def test_query_dedupes_and_resolves_versions_held_by_different_relays(tmp_path: Path) -> None:
    v1, v2 = memo("old", T0), memo("new", T0 + 10)
    x, y = memo("tie x", T0 + 5, d="tie"), memo("tie y", T0 + 5, d="tie")
    tie_low, tie_high = sorted([x, y], key=lambda e: e.id)
    shared = sign_event(SK, kind=1, content="everyone has me", created_at=T0 + 1)
    rust = RustRelayUnderTest()
    await rust.start()
    try:
        async with EmbeddedRelay(tmp_path / "a.db") as a, EmbeddedRelay(tmp_path / "b.db") as b:
            pool = RelayPool([a.url, b.url, rust.url], **fast_client_kwargs())
            await pool.start()
            assert await pool.wait_connected(5)
            # Each relay holds what it was sent: A the old memo and the higher-id tie, B the new
            # memo, rust-nostr's relay the new memo and the lower-id tie.
            for url, events in {a.url: [v1, tie_high], b.url: [v2], rust.url: [v2, tie_low]}.items():
                for ev in [*events, shared]:
                    assert (await pool.publish(ev, timeout=3, urls=[url])).any_accepted

            flt = [{"authors": [SK.public_key_hex]}]
            by_relay = await pool.query_by_relay(flt, timeout=3)
            assert {url: {e.id for e in evs or []} for url, evs in by_relay.items()} == {
                a.url: {v1.id, tie_high.id, shared.id},
                b.url: {v2.id, shared.id},
                rust.url: {v2.id, tie_low.id, shared.id},
            }
            # NIP-01 across relays: the newest memo, the lowest-id tie, the shared note once.
            merged = await pool.query(flt, timeout=3)
            assert [e.id for e in merged] == [v2.id, tie_low.id, shared.id]
            await pool.close()
    finally:
        await rust.stop()


async def test_query_never_trusts_a_relay_to_resolve_and_reports_failed_relays(tmp_path: Path) -> None:
    v1, v2, v3 = memo("one", T0), memo("two", T0 + 1), memo("three", T0 + 2)
    forged_newest = dataclasses.replace(memo("forged", T0 + 99), sig=v1.sig)

    async def careless(conn: ScriptedConnection) -> None:
        # Serves every version it ever saw (no replacement), twice, plus a forged "newest" one.
        while True:
            req = await conn.recv_type("REQ")
            for ev in (v1, v2, forged_newest, v2, v1):
                await conn.send(["EVENT", req[1], ev.to_dict()])
            await conn.send(["EOSE", req[1]])

    dead = f"ws://127.0.0.1:{free_port()}"
    async with (
        EmbeddedRelay(tmp_path / "good.db") as good,
        ScriptedRelay(careless) as stale,
        ScriptedRelay(silent) as quiet,
    ):
        pool = RelayPool([good.url, stale.url, quiet.url, dead], **fast_client_kwargs())
        await pool.start()
        assert await eventually(lambda: pool.states()[quiet.url] is ConnectionState.CONNECTED, 5)
        assert (await pool.publish(v3, timeout=3, urls=[good.url])).any_accepted
        flt = [{"kinds": [30078], "authors": [SK.public_key_hex]}]

        async with asyncio.timeout(5):
            by_relay = await pool.query_by_relay(flt, timeout=0.3)
        assert by_relay[quiet.url] is None and by_relay[dead] is None  # failed: no EOSE / not connected
        assert [e.id for e in by_relay[good.url] or []] == [v3.id]
        assert [e.id for e in by_relay[stale.url] or []] == [v2.id, v1.id]  # raw, deduped, forged dropped

        assert [e.id for e in await pool.query(flt, timeout=0.3)] == [v3.id]
        results = await pool.query_results(flt, timeout=0.3)
        assert results[dead].reason.startswith("not connected")
        assert results[quiet.url].reason == "no EOSE within 0.3s"
        assert pool.dropped()[stale.url]["invalid_sig"] >= 1
        await pool.close()


async def test_live_subscription_across_relays_delivers_each_event_once(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "a.db") as a, EmbeddedRelay(tmp_path / "b.db") as b:
        pool = RelayPool([a.url, b.url], **fast_client_kwargs())
        await pool.start()
        got: list[tuple[str, str]] = []
        eose: list[str] = []
        sub = pool.subscribe([{"authors": [SK.public_key_hex]}], lambda url, ev: got.append((url, ev.id)),
                             on_eose=eose.append)
        assert await eventually(lambda: sorted(eose) == sorted([a.url, b.url]), 5)
        assert sorted(sub.eose_from) == sorted([a.url, b.url])

        both = sign_event(SK, kind=1, content="to both", created_at=T0)
        assert len((await pool.publish(both, timeout=3)).accepted_by) == 2
        only_b = sign_event(SK, kind=1, content="to b", created_at=T0 + 1)
        await pool.publish(only_b, timeout=3, urls=[b.url])
        # A relay sends in order: once each relay's own marker is here, a duplicate from it would be too.
        markers = {url: sign_event(SK, kind=1, content=f"marker {n}", created_at=T0 + 2 + n)
                   for n, url in enumerate((a.url, b.url))}
        for url, marker in markers.items():
            await pool.publish(marker, timeout=3, urls=[url])
        assert await eventually(lambda: len(got) >= 4, 3)
        assert [ev_id for _, ev_id in got[:2]] == [both.id, only_b.id]
        assert got[1][0] == b.url
        assert sorted(got[2:]) == sorted((url, m.id) for url, m in markers.items()) and len(got) == 4

        await sub.close()
        later: list[str] = []  # a second subscription sees what the closed one would have been sent
        again = pool.subscribe([{"authors": [SK.public_key_hex]}], lambda url, ev: later.append(ev.id))
        assert await eventually(lambda: len(later) == 4, 3)  # the stored events: it is live on both relays
        after = sign_event(SK, kind=1, content="after close", created_at=T0 + 5)
        await pool.publish(after, timeout=3)
        assert await eventually(lambda: after.id in later, 3)
        assert len(got) == 4
        await again.close()
        await pool.close()


async def test_state_listeners_and_dropped_counters_per_relay(tmp_path: Path) -> None:
    good_ev = sign_event(SK, kind=1, content="fine", created_at=T0)
    forged = dataclasses.replace(good_ev, content="forged")

    async def forger(conn: ScriptedConnection) -> None:
        while True:
            req = await conn.recv_type("REQ")
            await conn.send(["EVENT", req[1], forged.to_dict()])
            await conn.send_raw("{{{ garbage")
            await conn.send(["EOSE", req[1]])

    seen: list[tuple[str, ConnectionState]] = []
    async with EmbeddedRelay(tmp_path / "good.db") as good, ScriptedRelay(forger) as bad:
        pool = RelayPool([good.url, bad.url], **fast_client_kwargs())
        pool.add_state_listener(lambda url, st: seen.append((url, st)))
        await pool.start()
        assert await pool.wait_connected(5)
        assert (good.url, ConnectionState.CONNECTED) in seen and (bad.url, ConnectionState.CONNECTED) in seen
        await pool.query([{"kinds": [1]}], timeout=3)
        assert pool.dropped() == {good.url: Counter(), bad.url: Counter({"invalid_id": 1, "bad_json": 1})}
        await pool.close()
        assert (good.url, ConnectionState.CLOSED) in seen and (bad.url, ConnectionState.CLOSED) in seen
