"""A relay that floods the client (issue #10, "hostile relays the client talks to").

The flooding relay runs in its own process (tests/flood_relay.py), so the loop-lag probe measures the
client alone; the honest relay is our embedded relay, in this process. For a few seconds the client
subscribes to both and publishes to both, then we check that:

* the event loop stayed responsive: a task sleeping 10 ms wakes at most 50 ms late at the 95th
  percentile (issue #10's bound; the figures are printed by bench/client_flood_bench.py), counted in the
  loop's CPU time so that a busy machine does not pass for a blocked loop;
* a publish to the flooding relay times out close to its timeout, not several times later;
* the same bad event is verified once, however often it comes back (and across reconnections);
* the flooding relay is disconnected, and retried after waits that double;
* every event published to the honest relay still arrives on the subscription.

Every loop here is bounded in time; the flood relay process is killed at the end of each test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fault_relay import HostileRelay, with_bad_signature
from flood_relay import bad_signature_event
from flood_rig import PENALTY_BASE, PUBLISH_TIMEOUT, CountingVerifier, FloodRun, flood_run
from relay_servers import fast_client_kwargs

from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool

SK = SecretKey.from_hex("0b" * 32)
MAX_P95_LAG_S = 0.050
FILTER = {"kinds": [1]}


def _check_common(run: FloodRun, check_lag: Callable[[], None]) -> None:
    assert not run.honest_failures, run.honest_failures
    assert run.legit and {e.id for e in run.legit} <= run.got, "events from the honest relay were lost"
    check_lag()
    # A timeout overrun of 2.5-4x was the bug; modest here means under 2x.
    assert all(s < 2 * PUBLISH_TIMEOUT for s in run.flood_publish_s), run.flood_publish_s


def _lag_checker(run: FloodRun) -> Callable[[], None]:
    def check() -> None:
        # ~300 wake-ups in the flood's 3 s on a quiet machine; a starved one gets fewer, never none.
        assert len(run.probe.cpu_lags) >= 20, run.probe.summary()
        assert run.probe.percentile(95, cpu=True) <= MAX_P95_LAG_S, run.probe.summary()

    return check


async def test_bad_signature_flood(tmp_path: Path) -> None:
    run, flood_url = await flood_run(tmp_path, "badsig")
    _check_common(run, _lag_checker(run))
    assert run.pool is not None
    client = run.pool.client(flood_url)
    assert client.dropped["invalid_sig"] > 100  # the flood did arrive...
    # ... and its one bad event was verified once, across every reconnection
    assert run.verifier.calls[str(bad_signature_event(0)["id"])] == 1
    assert client.disconnects["invalid_sig"] >= 2
    gaps = run.reconnect_gaps()
    assert len(gaps) >= 2, run.states
    for i, gap in enumerate(gaps[:3]):  # waits never end early: these bounds are not timing-flaky
        assert gap >= PENALTY_BASE * 2**i * 0.95, gaps


async def test_invalid_json_flood(tmp_path: Path) -> None:
    run, flood_url = await flood_run(tmp_path, "badjson")
    _check_common(run, _lag_checker(run))
    assert run.pool is not None
    client = run.pool.client(flood_url)
    assert client.dropped["bad_json"] > 100
    assert client.disconnects["bad_json"] >= 2
    gaps = run.reconnect_gaps()
    assert len(gaps) >= 2 and gaps[1] >= 2 * PENALTY_BASE * 0.95, gaps


async def test_verification_is_rate_limited_per_relay(tmp_path: Path) -> None:
    """Distinct bad events, each worth a check: the relay gets ``verify_rate`` checks a second."""
    rate, burst = 400.0, 100.0
    started = time.monotonic()
    # A window too large to fill: this test sees the rate limit alone, not the hang-up.
    run, _flood_url = await flood_run(tmp_path, "distinct", verify_rate=rate, verify_burst=burst,
                                      health_window=1_000_000)
    elapsed = time.monotonic() - started
    legit_ids = {e.id for e in run.legit}
    flood_checks = sum(n for eid, n in run.verifier.calls.items() if eid not in legit_ids)
    assert flood_checks > burst  # it did flood
    assert flood_checks <= burst + rate * elapsed + 1, (flood_checks, elapsed)  # one check of debt at most
    _check_common(run, _lag_checker(run))


async def test_frames_are_rate_limited_per_relay(tmp_path: Path) -> None:
    """One valid event again and again: nothing is invalid, yet the relay gets ``frame_rate``
    frames a second of our time, and nothing it sends is lost meanwhile (its socket waits)."""
    rate, burst = 1000.0, 200.0
    started = time.monotonic()
    run, flood_url = await flood_run(tmp_path, "repeat", frame_rate=rate, frame_burst=burst)
    elapsed = time.monotonic() - started
    assert run.pool is not None
    client = run.pool.client(flood_url)
    assert burst < client.frames_received <= burst + rate * elapsed + 1, (client.frames_received, elapsed)
    assert not client.disconnects and not client.dropped.get("invalid_sig")
    _check_common(run, _lag_checker(run))


async def test_a_forgery_cannot_poison_the_memory_of_failed_events(tmp_path: Path) -> None:
    """A hostile relay serves a genuine event's id with a bad signature first; the genuine event,
    from an honest relay, is still delivered (failures are remembered by id *and* signature)."""
    genuine = sign_event(SK, kind=1, content="the real one", created_at=int(time.time()))
    async with EmbeddedRelay(tmp_path / "honest.sqlite3") as honest, HostileRelay(
        [with_bad_signature(genuine)]
    ) as hostile:
        verifier = CountingVerifier()
        pool = RelayPool([hostile.url, honest.url], verifier=verifier, **fast_client_kwargs())
        await pool.start()
        try:
            assert await pool.wait_connected(5.0)
            assert (await pool.publish(genuine, urls=[honest.url])).any_accepted
            first = await pool.client(hostile.url).query([FILTER], timeout=3.0)
            assert first == [] and pool.dropped()[hostile.url]["invalid_sig"] == 1
            again = await pool.query([{"ids": [genuine.id]}], timeout=3.0)
            assert [e.id for e in again] == [genuine.id]
            assert pool.dropped()[hostile.url]["invalid_sig"] == 2  # the forgery again: remembered...
            assert verifier.calls[genuine.id] == 2  # ...checked once, and the genuine copy once
        finally:
            await pool.close()


@pytest.mark.parametrize("share", [0.2, 0.4])
async def test_a_relay_with_some_invalid_frames_is_not_disconnected(share: float) -> None:
    """Below the invalid share, a relay keeps its connection (a few bad events are no flood)."""
    window, total = 50, 200
    mixed: list[dict | str] = []
    for i in range(total):  # bad ones spread evenly: any 50 in a row hold at most ceil(50 * share)
        ev = sign_event(SK, kind=1, content=f"event {i}", created_at=1_700_000_000 + i)
        mixed.append(with_bad_signature(ev) if int((i + 1) * share) > int(i * share) else ev.to_dict())
    bad_count = int(total * share)
    async with HostileRelay(mixed) as relay:
        pool = RelayPool([relay.url], health_window=window, **fast_client_kwargs())
        await pool.start()
        try:
            assert await pool.wait_connected(5.0)
            result = (await pool.query_results([FILTER], timeout=5.0))[relay.url]
            client = pool.client(relay.url)
            assert result.complete and client.connected and not client.disconnects
            assert client.dropped["invalid_sig"] == bad_count
        finally:
            await pool.close()
