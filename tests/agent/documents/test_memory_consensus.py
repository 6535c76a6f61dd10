"""Relays that disagree about a memory: ``relay_versions`` finds who holds what and ``reconcile``
brings the lagging ones up to the newest version — with real relays on loopback (ours behind fault
proxies, rust-nostr's relay, and a hostile relay serving forged versions)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from fault_relay import FaultRig, HostileRelay, forged, with_bad_signature
from relay_servers import RustRelayUnderTest

from didactyl_tui.agent.documents.outbox import DELIVERED, REFUSED, SUPERSEDED, Outbox
from didactyl_tui.agent.documents.publisher import DocumentPublisher
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.results import Verdict

SK = SecretKey.from_hex("07" * 32)
OTHER = SecretKey.from_hex("08" * 32)
D = "long_term_memory"
FILTER = {"authors": [SK.public_key_hex], "kinds": [30078], "#d": [D]}
FAST = {"backoff_base": 0.01, "backoff_max": 0.1, "connect_timeout": 1.0, "ping_interval": None}


def memory_event(content: str, created_at: int, sk: SecretKey = SK, d: str = D) -> Event:
    return sign_event(sk, kind=30078, content=content, created_at=created_at, tags=[["d", d], ["app", "didactyl"]])


async def cancel_retry_loop(rig: FaultRig) -> None:
    assert rig.runner is not None
    rig.runner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await rig.runner
    rig.runner = None


async def put(url: str, *events: Event) -> None:
    """Publish straight to one relay, as another device would."""
    pool = RelayPool([url], **FAST)
    await pool.start()
    try:
        await pool.wait_connected(5.0)
        for ev in events:
            outcome = await pool.publish(ev, timeout=3.0)
            assert outcome.any_accepted, outcome.summary()
    finally:
        await pool.close()


async def wait_until(check, timeout: float = 10.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def held_ids(relay: EmbeddedRelay) -> list[str]:
    return [e.id for e in await relay.query([FILTER])]


async def test_lagging_relay_is_brought_up_to_date(tmp_path: Path) -> None:
    async with FaultRig(tmp_path, 3, timeout=2.0) as rig:
        v1, v2 = memory_event("old", 1001), memory_event("new", 1002)
        await put(rig.relays[0].url, v2)  # relay 0: newest
        await put(rig.relays[1].url, v1)  # relay 1: an older version
        # relay 2: none at all
        await rig.pool.wait_connected(5.0)
        best, holdings = await rig.publisher.relay_versions(SK.public_key_hex, 30078, D)
        assert best == v2
        by_url = {h.url: h for h in holdings}
        a, b, c = rig.urls
        assert (by_url[a].event_id, by_url[a].current) == (v2.id, True)
        assert (by_url[b].event_id, by_url[b].created_at, by_url[b].current) == (v1.id, 1001, False)
        assert (by_url[c].event_id, by_url[c].current, by_url[c].reachable) == (None, False, True)

        # reconcile alone: the retry loop's later passes also send to relays absent from the outbox entry
        # (the current one here), which this test is not about.
        await cancel_retry_loop(rig)
        outcome = await rig.publisher.reconcile(best, holdings)
        assert outcome is not None and sorted(outcome.results) == sorted([b, c])  # only the laggards
        assert outcome.any_accepted and len(outcome.accepted_by) == 2
        for relay in rig.relays:
            assert await held_ids(relay) == [v2.id]
        assert rig.proxies[0].forwarded_events() == []  # the relay that was current got nothing
        entry = rig.outbox.get(v2.id)
        assert entry.state == DELIVERED and sorted(entry.accepted_by) == sorted([b, c])

        # now everyone agrees: nothing to do
        best, holdings = await rig.publisher.relay_versions(SK.public_key_hex, 30078, D)
        assert all(h.current for h in holdings)
        assert await rig.publisher.reconcile(best, holdings) is None


async def test_lagging_relay_that_refuses_for_now_is_retried(tmp_path: Path) -> None:
    async with FaultRig(tmp_path, 2, timeout=2.0) as rig:
        v1, v2 = memory_event("old", 1001), memory_event("new", 1002)
        await put(rig.relays[0].url, v2)
        await put(rig.relays[1].url, v1)
        await rig.pool.wait_connected(5.0)
        rig.proxies[1].reject_next(2, "rate-limited: slow down")
        best, holdings = await rig.publisher.relay_versions(SK.public_key_hex, 30078, D)
        outcome = await rig.publisher.reconcile(best, holdings)
        assert outcome.results[rig.urls[1]].verdict is Verdict.REJECTED
        # the outbox owes it to the lagging relay and the retry loop delivers it
        assert await wait_until(lambda: rig.urls[1] in rig.outbox.get(v2.id).accepted_by)
        assert await held_ids(rig.relays[1]) == [v2.id]


async def test_relay_that_lost_its_data_is_refilled_even_if_it_once_accepted(tmp_path: Path) -> None:
    # rust-nostr's test relay keeps events in memory: a restart loses them, as some real relays do.
    rust = RustRelayUnderTest()
    await rust.start()
    try:
        async with EmbeddedRelay(tmp_path / "r.sqlite3") as ours:
            pool = RelayPool([ours.url, rust.url], **FAST)
            await pool.start()
            outbox = Outbox(tmp_path / "o.sqlite3", base_delay=0.01, max_delay=0.1)
            pub = DocumentPublisher(pool, outbox, timeout=2.0, base_delay=0.01, max_delay=0.1)
            try:
                await pool.wait_connected(5.0)
                ev = memory_event("v1", 1001)
                assert len((await pub.publish(ev)).accepted_by) == 2
                await rust.restart()  # comes back empty on the same port
                assert await wait_until(lambda: pool.states()[rust.url].value == "connected")
                # "connected" may still be the old connection, not yet seen closing: ask until the new one answers.
                for _ in range(50):
                    best, holdings = await pub.relay_versions(SK.public_key_hex, 30078, D)
                    lag = {h.url: h for h in holdings}[rust.url]
                    if lag.reachable:
                        break
                    await asyncio.sleep(0.1)
                assert lag.reachable and lag.event_id is None
                outcome = await pub.reconcile(best, holdings)
                assert outcome.accepted_by == [rust.url]
                again = await pool.query_by_relay([FILTER], timeout=3.0)
                assert [e.id for e in again[rust.url]] == [ev.id]
            finally:
                await pool.close()
                outbox.close()
    finally:
        await rust.stop()


async def test_rust_relay_holding_an_older_version_is_updated(tmp_path: Path, rust_relay) -> None:
    async with EmbeddedRelay(tmp_path / "r.sqlite3") as ours:
        v1, v2 = memory_event("old", 1001), memory_event("new", 1002)
        await put(ours.url, v2)
        await put(rust_relay.url, v1)
        pool = RelayPool([ours.url, rust_relay.url], **FAST)
        await pool.start()
        outbox = Outbox(tmp_path / "o.sqlite3")
        pub = DocumentPublisher(pool, outbox, timeout=2.0)
        try:
            await pool.wait_connected(5.0)
            best, holdings = await pub.relay_versions(SK.public_key_hex, 30078, D)
            assert best == v2 and [h.current for h in holdings] == [True, False]
            outcome = await pub.reconcile(best, holdings)
            assert outcome.accepted_by == [rust_relay.url]
            best, holdings = await pub.relay_versions(SK.public_key_hex, 30078, D)
            assert all(h.current for h in holdings)
        finally:
            await pool.close()
            outbox.close()


async def test_newer_local_pending_version_wins_over_what_relays_hold(tmp_path: Path) -> None:
    async with FaultRig(tmp_path, 2, timeout=2.0) as rig:
        v1 = memory_event("on the relays", 1001)
        await put(rig.relays[0].url, v1)
        await put(rig.relays[1].url, v1)
        for p in rig.proxies:
            p.reject_next(1, "error: try again")
        v2 = memory_event("saved here, not yet accepted", 1002)
        outcome = await rig.publisher.publish(v2)
        assert not outcome.any_accepted
        best, holdings = await rig.publisher.relay_versions(SK.public_key_hex, 30078, D)
        assert best == v1  # what the relays hold...
        outcome = await rig.publisher.reconcile(best, holdings)
        # ... but the newest version is ours: that is what goes out, never v1 again
        assert outcome.event_id == v2.id and len(outcome.accepted_by) == 2
        for relay in rig.relays:
            assert await held_ids(relay) == [v2.id]
        assert rig.outbox.get(v2.id).state == DELIVERED
        assert rig.outbox.get(v1.id) is None  # a remote version older than ours is not adopted


async def test_two_devices_the_stale_pending_edit_is_superseded_not_sent(tmp_path: Path) -> None:
    async with FaultRig(tmp_path, 2, timeout=1.0) as rig:
        for p in rig.proxies:
            await p.stop()  # device B (this rig) is offline
        stale = memory_event("device B, offline", 1001)
        await rig.publisher.publish(stale)
        assert rig.outbox.get(stale.id).state == "pending"
        newer = memory_event("device A", 1005)
        for relay in rig.relays:
            await put(relay.url, newer)  # device A saves meanwhile, straight to the relays
        # device B learns of A's version (its live subscription, or relay_versions) before it is back
        superseded = await rig.publisher.note_remote(newer)
        assert superseded == [stale.id]
        for p in rig.proxies:
            await p.start()
        rig.publisher.wake()
        await rig.pool.wait_connected(5.0)
        # A whole retry pass of our own, all connected (passes take turns with the loop's): it sends nothing.
        rig.publisher.wake()
        assert await rig.publisher.retry_due() == []
        assert all(p.forwarded_events() == [] for p in rig.proxies)  # the stale edit never went out
        assert rig.outbox.get(stale.id).state == SUPERSEDED
        assert rig.outbox.unfinished(rig.urls) == []
        # a save that arrives later but is older than what we saw is refused at once
        late = memory_event("even older", 1003)
        assert rig.outbox.enqueue(late) == SUPERSEDED


async def test_two_devices_unaware_the_relays_keep_the_newest(tmp_path: Path) -> None:
    async with FaultRig(tmp_path, 2, timeout=1.0) as rig:
        for p in rig.proxies:
            await p.stop()
        stale = memory_event("device B, offline", 1001)
        await rig.publisher.publish(stale)
        newer = memory_event("device A", 1005)
        for relay in rig.relays:
            await put(relay.url, newer)
        for p in rig.proxies:
            await p.start()
        # B does not know about A's save: its retry reaches the relays, which answer "replaced:"
        assert await wait_until(lambda: rig.outbox.get(stale.id).state == REFUSED)
        entry = rig.outbox.get(stale.id)
        assert all(s.startswith("replaced:") for s in entry.relays.values())
        assert "replaced:" in entry.last_error
        for relay in rig.relays:
            assert await held_ids(relay) == [newer.id]
        # and relay_versions + reconcile settle B's view
        best, holdings = await rig.publisher.relay_versions(SK.public_key_hex, 30078, D)
        assert best == newer
        assert await rig.publisher.reconcile(best, holdings) is None
        assert rig.outbox.get(stale.id).state == SUPERSEDED


async def test_forged_newer_versions_on_a_hostile_relay_do_not_win(tmp_path: Path) -> None:
    real = memory_event("real", 1002)
    forged_newer = [
        with_bad_signature(memory_event("forged", 9_000)),  # validly shaped, bad signature
        forged(real, created_at=9_001),  # id no longer matches
        memory_event("someone else", 9_002, sk=OTHER).to_dict(),  # another author, same d tag
    ]
    async with EmbeddedRelay(tmp_path / "r.sqlite3") as ours, HostileRelay(forged_newer) as hostile:
        await put(ours.url, real)
        pool = RelayPool([ours.url, hostile.url], **FAST)
        await pool.start()
        outbox = Outbox(tmp_path / "o.sqlite3")
        pub = DocumentPublisher(pool, outbox, timeout=2.0)
        try:
            await pool.wait_connected(5.0)
            best, holdings = await pub.relay_versions(SK.public_key_hex, 30078, D)
            assert best == real
            h = {x.url: x for x in holdings}[hostile.url]
            assert h.reachable and h.event_id is None  # forged versions count for nothing
            dropped = pool.dropped()[hostile.url]
            assert dropped["invalid_sig"] == 1 and dropped["invalid_id"] == 1 and dropped["filter_mismatch"] == 1
            outcome = await pub.reconcile(best, holdings)
            assert outcome.accepted_by == [hostile.url]  # the real newest is offered to it
            sent = [m[1]["id"] for m in hostile.received if m[0] == "EVENT"]
            assert sent == [real.id]
        finally:
            await pool.close()
            outbox.close()
