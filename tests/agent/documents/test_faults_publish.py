"""Memory publishes under relay faults, with real sockets: no edit is lost, nothing crashes, and the
status says what happened (a verdict per relay, outbox entry states).

Each test runs embedded relays behind fault proxies (tests/fault_relay.py) with a real pool, outbox
and publisher. Waits are "until true or a generous deadline", never timed assertions.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from fault_relay import FaultRig, SilentServer
from lock_holder import LockHolder

from didactyl_tui.agent.documents.outbox import DELIVERED, PENDING, REFUSED, SUPERSEDED, Outbox
from didactyl_tui.agent.documents.publisher import DocumentPublisher
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.results import Verdict

SK = SecretKey.from_hex("03" * 32)
D = "short_term_memory"
FILTER = {"authors": [SK.public_key_hex], "kinds": [30078], "#d": [D]}


def memory_event(content: str, created_at: int, d: str = D) -> Event:
    return sign_event(SK, kind=30078, content=content, created_at=created_at, tags=[["d", d], ["app", "didactyl"]])


async def wait_until(check: Callable[[], Awaitable[bool]] | Callable[[], bool], timeout: float = 10.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result or loop.time() >= deadline:
            return bool(result)
        await asyncio.sleep(0.02)


async def relay_holds(rig: FaultRig, i: int, ev: Event) -> bool:
    return [e.id for e in await rig.held(i, FILTER)] == [ev.id]


def entry(rig: FaultRig, ev: Event) -> Any:
    return rig.outbox.get(ev.id)


def delivered_everywhere(rig: FaultRig, ev: Event) -> Callable[[], bool]:
    def check() -> bool:
        e = rig.outbox.get(ev.id)
        return e is not None and e.state == DELIVERED and sorted(e.accepted_by) == sorted(rig.urls)

    return check


@pytest.fixture
async def rig(tmp_path: Path):
    async with FaultRig(tmp_path, 2, timeout=2.0) as r:
        yield r
        assert r.runner_error() is None


# --- killed mid-publish ---------------------------------------------------------------------------


async def test_relay_killed_after_event_before_ok_gets_it_resent(rig: FaultRig) -> None:
    a, b = rig.proxies
    a.kill_after_forward(1)
    ev = memory_event("v1", 1000)
    outcome = await rig.publisher.publish(ev)
    # The relay stored it, the OK never came back; the client reconnected and re-sent it within the
    # publish timeout, and the relay's "duplicate" counts as accepted.
    assert outcome.results[a.url].verdict is Verdict.ACCEPTED, outcome.summary()
    assert outcome.results[b.url].verdict is Verdict.ACCEPTED
    assert [e.what for e in a.log if e.what in ("event", "killed")][:2] == ["event", "killed"]
    assert len([e for e in a.forwarded_events() if e.event_id == ev.id]) == 2
    assert await relay_holds(rig, 0, ev) and await relay_holds(rig, 1, ev)
    assert entry(rig, ev).state == DELIVERED


async def test_every_relay_killed_mid_publish_still_delivers(rig: FaultRig) -> None:
    for p in rig.proxies:
        p.kill_after_forward(1)
    ev = memory_event("v1", 1000)
    await rig.publisher.publish(ev)
    assert await wait_until(delivered_everywhere(rig, ev))
    for i in range(2):
        assert await relay_holds(rig, i, ev)


# --- accepts the connection, never answers ---------------------------------------------------------


async def test_relay_that_never_answers_times_out_then_catches_up(rig: FaultRig) -> None:
    a, b = rig.proxies
    a.hang()
    ev = memory_event("v1", 1000)
    rig.publisher.timeout = 0.3
    outcome = await rig.publisher.publish(ev)
    assert outcome.results[a.url].verdict is Verdict.TIMEOUT
    assert outcome.results[b.url].verdict is Verdict.ACCEPTED
    e = entry(rig, ev)
    assert e.state == DELIVERED and e.relays[a.url].startswith("retry: timeout")
    assert e.relays_to_retry(rig.urls) == [a.url]
    assert not await relay_holds(rig, 0, ev)
    a.unhang()  # cut the hung connections; the client reconnects and the outbox retries
    assert await wait_until(delivered_everywhere(rig, ev))
    assert await relay_holds(rig, 0, ev)


async def test_all_relays_hanging_leaves_the_edit_pending_then_delivers(rig: FaultRig) -> None:
    for p in rig.proxies:
        p.hang()
    rig.publisher.timeout = 0.2
    ev = memory_event("v1", 1000)
    outcome = await rig.publisher.publish(ev)
    assert not outcome.any_accepted
    assert {r.verdict for r in outcome.results.values()} == {Verdict.TIMEOUT}
    assert [e.event.id for e in rig.outbox.pending()] == [ev.id]
    assert rig.publisher.pending_count() == 1
    for p in rig.proxies:
        p.unhang()
    assert await wait_until(delivered_everywhere(rig, ev))
    assert rig.publisher.pending_count() == 0


async def test_server_that_never_completes_the_handshake(tmp_path: Path) -> None:
    async with SilentServer() as silent, EmbeddedRelay(tmp_path / "r.sqlite3") as good:
        pool = RelayPool([silent.url, good.url], backoff_base=0.01, backoff_max=0.1, connect_timeout=0.3,
                         ping_interval=None)
        await pool.start()
        outbox = Outbox(tmp_path / "o.sqlite3", base_delay=0.01, max_delay=0.1)
        pub = DocumentPublisher(pool, outbox, timeout=0.5, base_delay=0.01, max_delay=0.1)
        runner = asyncio.create_task(pub.run(max_sleep=0.2))
        try:
            await pool.wait_connected(3.0, all_relays=False)
            ev = memory_event("v1", 1000)
            outcome = await pub.publish(ev)
            assert outcome.results[good.url].verdict is Verdict.ACCEPTED
            assert outcome.results[silent.url].verdict in (Verdict.NOT_CONNECTED, Verdict.TIMEOUT)
            assert silent.accepted >= 1
            e = outbox.get(ev.id)
            # a clear status: delivered, and still owed to the silent relay
            assert e.state == DELIVERED and e.relays_to_retry(pool.urls) == [silent.url]
            # Retries keep failing without harm: two more attempts, and the loop is still there.
            tried = e.attempts
            assert await wait_until(lambda: outbox.get(ev.id).attempts >= tried + 2)
            assert not runner.done()
            assert outbox.get(ev.id).relays_to_retry(pool.urls) == [silent.url]
        finally:
            runner.cancel()
            await pool.close()
            outbox.close()


# --- OK false -------------------------------------------------------------------------------------


async def test_ok_false_transient_is_retried_until_accepted(rig: FaultRig) -> None:
    a, _ = rig.proxies
    a.reject_next(3, "error: database busy, try later")
    ev = memory_event("v1", 1000)
    outcome = await rig.publisher.publish(ev)
    assert outcome.results[a.url].verdict is Verdict.REJECTED
    assert outcome.results[a.url].message.startswith("error:")
    assert await wait_until(delivered_everywhere(rig, ev))
    assert [e.what for e in a.log if e.event_id == ev.id][:3] == ["rejected"] * 3


async def test_ok_false_final_is_not_retried_on_that_relay(rig: FaultRig) -> None:
    a, _b = rig.proxies
    a.reject_next(1, "blocked: you are not on the allow list")
    ev = memory_event("v1", 1000)
    outcome = await rig.publisher.publish(ev)
    assert outcome.results[a.url].verdict is Verdict.REJECTED
    e = entry(rig, ev)
    assert e.state == DELIVERED
    assert e.relays[a.url] == "refused: blocked: you are not on the allow list"
    assert rig.outbox.unfinished(rig.urls) == []
    assert rig.outbox.due(rig.urls, now=float("inf")) == []


@pytest.mark.parametrize("step", ["enqueue", "record"])
async def test_a_retry_pass_during_a_publish_does_not_send_it_again(rig: FaultRig, step: str) -> None:
    """The retry loop wakes whenever a relay (re)connects: a pass that reads the outbox right after the entry is
    queued, or after the relays answered but before their verdicts are written, must leave the event to the
    publish under way (it once sent it again, and the relay that had refused it for good accepted the copy)."""
    a, _b = rig.proxies
    a.reject_next(1, "blocked: you are not on the allow list")
    reached, release = threading.Event(), threading.Event()
    real = getattr(rig.outbox, step)

    def held(*args: Any) -> Any:  # held until the retry pass has run: after the entry is queued, before verdicts
        if step == "enqueue":
            result = real(*args)
        reached.set()
        release.wait(10)
        return result if step == "enqueue" else real(*args)

    setattr(rig.outbox, step, held)
    ev = memory_event("v1", 1000)
    publishing = asyncio.create_task(rig.publisher.publish(ev))
    try:
        assert await asyncio.to_thread(reached.wait, 10)
        assert await rig.publisher.retry_due() == []
    finally:
        release.set()
    outcome = await publishing
    assert outcome.results[a.url].verdict is Verdict.REJECTED
    assert entry(rig, ev).relays[a.url] == "refused: blocked: you are not on the allow list"
    assert [e.event_id for e in a.forwarded_events()] == []  # never sent past the refusal


async def test_every_relay_refusing_for_good_is_a_clear_refused_state(rig: FaultRig) -> None:
    for p in rig.proxies:
        p.reject_next(1, "invalid: we do not like this")
    ev = memory_event("v1", 1000)
    outcome = await rig.publisher.publish(ev)
    assert not outcome.any_accepted
    e = entry(rig, ev)
    assert e.state == REFUSED and "invalid: we do not like this" in e.last_error
    assert rig.outbox.pending() == [] and rig.outbox.unfinished(rig.urls) == []


async def test_relay_holding_a_newer_version_answers_replaced_and_is_not_retried(rig: FaultRig) -> None:
    newer = memory_event("from another device", 2000)
    # another device already put a newer version on relay 0
    other = RelayPool([rig.relays[0].url], ping_interval=None)
    await other.start()
    try:
        assert (await other.publish(newer, timeout=3.0)).any_accepted
    finally:
        await other.close()
    ev = memory_event("stale local edit", 1000)
    outcome = await rig.publisher.publish(ev)
    a, _b = rig.proxies
    assert outcome.results[a.url].verdict is Verdict.REJECTED
    assert outcome.results[a.url].message.startswith("replaced:")
    e = entry(rig, ev)
    assert e.relays[a.url].startswith("replaced:") and e.relays_to_retry(rig.urls) == []
    assert await relay_holds(rig, 0, newer)  # the stale one never replaced it


# --- garbage, truncated and oversized frames ------------------------------------------------------


async def test_garbage_truncated_and_oversized_frames_are_dropped_and_counted(tmp_path: Path) -> None:
    limit = 16 * 1024
    async with FaultRig(tmp_path, 2, timeout=2.0, client_kwargs={"max_frame_bytes": limit}) as rig:
        a, _ = rig.proxies
        await rig.pool.wait_connected(5.0)
        ev1 = memory_event("v1", 1000)
        await a.inject(b"\x00\xff\xfe not json at all")
        await a.inject('["OK","' + ev1.id + '",tr')  # truncated
        await a.inject('["EVENT","nosuchsub",' + json.dumps(ev1.to_dict())[:-20])  # truncated event
        await a.inject(json.dumps(["NOTICE", "x" * (limit + 100)]))  # oversized, within websockets' cap
        await a.inject('{"not": "a relay message"}')
        connections_before = a.connections
        outcome = await rig.publisher.publish(ev1)
        assert outcome.any_accepted and outcome.results[a.url].verdict is Verdict.ACCEPTED
        dropped = rig.pool.dropped()[a.url]
        assert dropped["bad_json"] == 2
        assert dropped["unknown_sub"] == 1  # read from the frame's head: never parsed
        assert dropped["oversized"] == 1
        assert dropped["bad_message"] == 1
        assert a.connections == connections_before  # none of these cost the connection

        # A frame beyond twice the limit makes websockets close the connection: we reconnect.
        await a.inject(json.dumps(["NOTICE", "y" * (4 * limit)]))
        ev2 = memory_event("v2", 1001)
        await rig.publisher.publish(ev2)
        assert await wait_until(delivered_everywhere(rig, ev2))
        assert rig.pool.dropped()[a.url]["oversized"] == 2
        assert a.connections > connections_before
        assert await relay_holds(rig, 0, ev2)


async def test_garbage_in_place_of_the_ok_means_retry_not_loss(tmp_path: Path) -> None:
    async with FaultRig(tmp_path, 1, timeout=0.3) as rig:
        (a,) = rig.proxies
        a.hang()  # the EVENT is swallowed ...
        ev = memory_event("v1", 1000)
        publish = asyncio.create_task(rig.publisher.publish(ev))
        assert await wait_until(lambda: any(e.what == "swallowed" and ev.id[:40] in e.message for e in a.log))
        await a.inject('["OK","' + ev.id + '",true,"')  # ... and a broken OK is all that comes back
        outcome = await publish
        assert outcome.results[a.url].verdict is Verdict.TIMEOUT
        assert entry(rig, ev).state == PENDING
        a.unhang()
        assert await wait_until(delivered_everywhere(rig, ev))


# --- CLOSED on a subscription --------------------------------------------------------------------


async def test_closed_on_a_live_subscription_is_reported_and_publishing_goes_on(rig: FaultRig) -> None:
    a, _ = rig.proxies
    await rig.pool.wait_connected(5.0)
    closed: list[tuple[str, str]] = []
    seen: list[str] = []
    sub = rig.pool.subscribe([FILTER], lambda url, ev: seen.append(ev.id), on_closed=lambda u, r: closed.append((u, r)))
    assert await wait_until(lambda: len(sub.eose_from) == 2)
    assert await a.send_closed("error: shutting down subscriptions") == 1
    assert await wait_until(lambda: closed == [(a.url, "error: shutting down subscriptions")])
    ev = memory_event("v1", 1000)
    outcome = await rig.publisher.publish(ev)
    assert outcome.any_accepted and len(outcome.accepted_by) == 2
    assert await wait_until(lambda: seen == [ev.id])  # still delivered by the other relay's subscription
    await sub.close()


async def test_closed_on_req_makes_relay_versions_say_unreachable_not_empty(rig: FaultRig) -> None:
    a, b = rig.proxies
    ev = memory_event("v1", 1000)
    await rig.publisher.publish(ev)
    a.closed_on_req("restricted: no reading here")
    best, holdings = await rig.publisher.relay_versions(SK.public_key_hex, 30078, D)
    assert best is not None and best.id == ev.id
    by_url = {h.url: h for h in holdings}
    assert by_url[a.url].reachable is False and by_url[a.url].event_id is None
    assert by_url[b.url].reachable and by_url[b.url].current
    # an unreachable relay is not treated as lagging: nothing is republished to it
    assert await rig.publisher.reconcile(best, holdings) is None


# --- restarts -------------------------------------------------------------------------------------


async def test_relay_restart_with_pending_edit(rig: FaultRig) -> None:
    await rig.relays[0].stop()
    ev = memory_event("v1", 1000)
    outcome = await rig.publisher.publish(ev)
    a, b = rig.proxies
    assert outcome.results[a.url].verdict is not Verdict.ACCEPTED
    assert outcome.results[b.url].verdict is Verdict.ACCEPTED
    await rig.restart_relay(0)
    assert await wait_until(delivered_everywhere(rig, ev))
    assert await relay_holds(rig, 0, ev)


async def test_all_relays_down_then_back(rig: FaultRig) -> None:
    for p in rig.proxies:
        await p.stop()
    ev = memory_event("v1", 1000)
    outcome = await rig.publisher.publish(ev)
    assert {r.verdict for r in outcome.results.values()} <= {Verdict.NOT_CONNECTED, Verdict.TIMEOUT}
    assert entry(rig, ev).state == PENDING
    for p in rig.proxies:
        await p.start()  # same port
    assert await wait_until(delivered_everywhere(rig, ev))


async def test_proxy_restart_on_same_port_many_times(rig: FaultRig) -> None:
    a, _ = rig.proxies
    port = a.port
    events = []
    for i in range(4):
        await a.restart(downtime=0.02)
        assert a.port == port
        ev = memory_event(f"v{i}", 1000 + i)
        events.append(ev)
        await rig.publisher.publish(ev)
    assert await wait_until(delivered_everywhere(rig, events[-1]))
    assert await relay_holds(rig, 0, events[-1])
    assert [rig.outbox.get(e.id).state for e in events[:-1]] == [SUPERSEDED] * 3


# --- newer supersedes pending older, across reconnects --------------------------------------------


async def test_pending_older_version_is_never_sent_after_the_newer(rig: FaultRig) -> None:
    _a, b = rig.proxies
    await b.stop()
    v1, v2, v3 = (memory_event(f"v{i}", 1000 + i) for i in range(1, 4))
    for ev in (v1, v2, v3):
        await rig.publisher.publish(ev)
    await b.start()
    assert await wait_until(delivered_everywhere(rig, v3))
    # relay b only ever saw the newest version
    assert [e.event_id for e in b.forwarded_events()] == [v3.id]
    assert [rig.outbox.get(e.id).state for e in (v1, v2)] == [SUPERSEDED, SUPERSEDED]


async def test_pending_edit_retried_across_repeated_disconnects(rig: FaultRig) -> None:
    a, _b = rig.proxies
    a.reject_next(100, "error: flaky")  # keeps failing while we cut the connection again and again
    ev = memory_event("v1", 1000)
    await rig.publisher.publish(ev)
    for _ in range(3):  # each time the client is back, the link is cut again
        seen = a.connections
        a.kill()
        assert await wait_until(lambda seen=seen: a.connections > seen)
    a._rejects.clear()  # the relay recovers
    assert await wait_until(delivered_everywhere(rig, ev))
    assert a.connections >= 4


# --- restart of the publisher (the app) ------------------------------------------------------------


async def test_pending_edits_survive_a_publisher_restart(rig: FaultRig) -> None:
    for p in rig.proxies:
        await p.stop()
    stm = memory_event("short", 1000)
    ltm = memory_event("long", 1000, d="long_term_memory")
    await rig.publisher.publish(stm)
    await rig.publisher.publish(ltm)
    assert {e.event.id for e in rig.outbox.pending()} == {stm.id, ltm.id}
    await rig.stop_publisher()  # the app quits with both edits pending
    for p in rig.proxies:
        await p.start()
    await rig.start_publisher(wait_connected=False)  # a new app on the same files
    assert await wait_until(delivered_everywhere(rig, stm))
    assert await wait_until(delivered_everywhere(rig, ltm))
    assert await relay_holds(rig, 0, stm)


async def test_restart_while_relay_still_down_then_back(rig: FaultRig) -> None:
    a, _ = rig.proxies
    await a.stop()
    ev = memory_event("v1", 1000)
    await rig.publisher.publish(ev)
    await rig.restart_publisher()
    await rig.publisher.retry_due()  # a retry pass of the new publisher's, with the relay still down
    e = rig.outbox.get(ev.id)
    assert e.state == DELIVERED and e.relays_to_retry(rig.urls) == [a.url]
    await a.start()
    assert await wait_until(delivered_everywhere(rig, ev))


# --- the outbox file locked by another process -----------------------------------------------------


async def _locked_rig(tmp_path: Path) -> FaultRig:
    rig = FaultRig(tmp_path, 2, timeout=1.0)
    await rig.start()
    # keep waits on the locked file short
    rig.outbox._db.execute("PRAGMA busy_timeout=50")
    return rig


async def test_locked_outbox_still_sends_and_stores_once_free(tmp_path: Path) -> None:
    rig = await _locked_rig(tmp_path)
    try:
        ev = memory_event("v1", 1000)
        with LockHolder(rig.outbox_path) as lock:
            outcome = await rig.publisher.publish(ev)
            assert outcome.any_accepted and len(outcome.accepted_by) == 2  # the edit went out anyway
            assert rig.publisher.outbox_error is not None and "locked" in rig.publisher.outbox_error
            assert [e.id for e in rig.publisher.unsaved()] == [ev.id]
            with pytest.raises(AgentError, match="locked"):
                rig.outbox.enqueue(memory_event("direct", 999))
            lock.let_go()
            assert await wait_until(lambda: rig.outbox.get(ev.id) is not None)
        # The row is written on a thread; the publisher notes the file writable once that write returns to it.
        assert await wait_until(lambda: delivered_everywhere(rig, ev)() and rig.publisher.outbox_error is None)
        assert rig.publisher.unsaved() == []
        assert rig.runner_error() is None
    finally:
        await rig.close()


async def test_locked_outbox_and_relays_down_keeps_the_edit_until_both_recover(tmp_path: Path) -> None:
    rig = await _locked_rig(tmp_path)
    try:
        for p in rig.proxies:
            await p.stop()
        v1, v2 = memory_event("v1", 1000), memory_event("v2", 1001)
        with LockHolder(rig.outbox_path) as lock:
            out1 = await rig.publisher.publish(v1)
            out2 = await rig.publisher.publish(v2)
            assert not out1.any_accepted and not out2.any_accepted
            assert [e.id for e in rig.publisher.unsaved()] == [v2.id]  # the newest, in memory
            assert rig.publisher.pending_count() == 1
            for p in rig.proxies:
                await p.start()
            # still locked: the in-memory copy is retried and reaches the relays
            assert await wait_until(lambda: all(p.forwarded_events() for p in rig.proxies))
            assert all(e.event_id == v2.id for p in rig.proxies for e in p.forwarded_events())
            lock.let_go()
        assert await wait_until(delivered_everywhere(rig, v2))
        assert rig.outbox.get(v1.id) is None  # never stored, never sent: it was superseded in memory
        for i in range(2):
            assert await relay_holds(rig, i, v2)
    finally:
        await rig.close()


async def test_record_failing_on_a_locked_file_loses_nothing(tmp_path: Path) -> None:
    rig = await _locked_rig(tmp_path)
    try:
        a, _b = rig.proxies
        await a.stop()
        ev = memory_event("v1", 1000)
        await rig.publisher.publish(ev)  # stored; relay a still owes it
        with LockHolder(rig.outbox_path) as lock:
            await a.start()
            rig.publisher.wake()
            # a gets it even though the outcome cannot be recorded
            assert await wait_until(lambda: bool(a.forwarded_events()))
            assert rig.runner_error() is None
            lock.let_go()
        assert await wait_until(delivered_everywhere(rig, ev))
    finally:
        await rig.close()


# --- the retry loop rests while a send is in flight -----------------------------------------------


class CountingOutbox(Outbox):
    scans = 0

    def unfinished(self, urls):  # type: ignore[no-untyped-def]
        CountingOutbox.scans += 1
        return super().unfinished(urls)


async def test_retry_loop_does_not_spin_while_a_publish_waits_on_a_hung_relay(tmp_path: Path) -> None:
    async with FaultRig(tmp_path, 1, timeout=0.5) as rig:
        await rig.stop_publisher()
        pool = RelayPool(rig.urls, backoff_base=0.01, backoff_max=0.1, ping_interval=None)
        await pool.start()
        await pool.wait_connected(5.0)
        CountingOutbox.scans = 0
        box = CountingOutbox(rig.outbox_path, base_delay=10.0)
        pub = DocumentPublisher(pool, box, timeout=0.5, base_delay=10.0)
        runner = asyncio.create_task(pub.run(max_sleep=30.0))
        try:
            assert await wait_until(lambda: CountingOutbox.scans > 0)  # the loop's first pass, then its rest
            rig.proxies[0].hang()
            CountingOutbox.scans = 0
            ev = memory_event("v1", 1000)
            publish = asyncio.create_task(pub.publish(ev))  # waits the 0.5 s timeout
            assert await wait_until(lambda: any(e.what == "swallowed" and ev.id[:40] in e.message
                                                for e in rig.proxies[0].log))
            pub.wake()  # e.g. another relay reconnected: the loop looks while the send is in flight
            outcome = await publish
            assert outcome.results[rig.urls[0]].verdict is Verdict.TIMEOUT
            # a spinning loop rescans the outbox thousands of times in 0.5 s; a resting one a few
            assert CountingOutbox.scans < 20, CountingOutbox.scans
        finally:
            runner.cancel()
            await pool.close()
            box.close()


async def test_restart_with_the_outbox_locked_still_delivers_pending_edits(tmp_path: Path) -> None:
    rig = await _locked_rig(tmp_path)
    try:
        for p in rig.proxies:
            await p.stop()
        ev = memory_event("v1", 1000)
        await rig.publisher.publish(ev)
        await rig.stop_publisher()  # the app quits with the edit pending
        for p in rig.proxies:
            await p.start()
        with LockHolder(rig.outbox_path) as lock:
            await rig.start_publisher(wait_connected=False)  # opens fine: reading needs no lock
            rig.outbox._db.execute("PRAGMA busy_timeout=50")
            # the pending edit reaches both relays although its progress cannot be written down
            assert await wait_until(lambda: all(p.forwarded_events() for p in rig.proxies))
            assert rig.outbox.get(ev.id).state == PENDING
            assert rig.publisher.outbox_error is not None
            lock.let_go()
        # The row is written on a thread; the publisher notes the file writable once that write returns to it.
        assert await wait_until(lambda: delivered_everywhere(rig, ev)() and rig.publisher.outbox_error is None)
        for i in range(2):
            assert await relay_holds(rig, i, ev)
    finally:
        await rig.close()
