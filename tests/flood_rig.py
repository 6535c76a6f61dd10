"""The client side of a flood: a pool over an honest embedded relay and a flooding relay (in its own
process, see flood_relay.py), a loop-lag probe, and publishes during the flood. Used by
tests/attacks/test_hostile_relay_flood.py and bench/client_flood_bench.py.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

from flood_relay import start_flood_relay
from loop_lag import LoopLagProbe
from relay_servers import eventually, fast_client_kwargs

from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey, verify_signature
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.results import ConnectionState, RelayVerdict, Verdict

SK = SecretKey.from_hex("0c" * 32)
FLOOD_SECONDS = 3.0
PUBLISH_TIMEOUT = 0.5
PENALTY_BASE = 0.3
FILTER = {"kinds": [1]}


class CountingVerifier:
    """The real signature check, counting calls per event id."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __call__(self, pubkey: str, msg: bytes, sig: bytes) -> bool:
        self.calls[msg.hex()] += 1
        return verify_signature(pubkey, msg, sig)


class FloodRun:
    """What one flood run observed."""

    def __init__(self) -> None:
        self.probe = LoopLagProbe()
        self.legit: list[Event] = []
        self.got: set[str] = set()
        self.flood_publish_s: list[float] = []  # publishes the flooding relay answered with a timeout
        self.honest_failures: list[RelayVerdict] = []  # the honest relay's answers that were not OK
        self.states: list[tuple[float, ConnectionState]] = []  # the flooding relay's, with times
        self.verifier = CountingVerifier()
        self.pool: RelayPool | None = None

    def reconnect_gaps(self) -> list[float]:
        """Seconds from each hang-up to the next connection."""
        gaps, down = [], None
        for at, state in self.states:
            if state is ConnectionState.DISCONNECTED and down is None:
                down = at
            elif state is ConnectionState.CONNECTED and down is not None:
                gaps.append(at - down)
                down = None
        return gaps


async def flood_run(tmp_path: Path, mode: str, seconds: float = FLOOD_SECONDS,
                    **client_kwargs: Any) -> tuple[FloodRun, str]:
    """Flood for ``seconds`` while publishing to both relays; returns what was seen and the
    flooding relay's URL (the pool is closed by then; its clients keep their counters)."""
    run = FloodRun()
    async with EmbeddedRelay(tmp_path / "honest.sqlite3") as honest, start_flood_relay(mode, 30.0) as flood_url:

        def on_state(url: str, state: ConnectionState) -> None:
            if url == flood_url:
                run.states.append((time.monotonic(), state))

        kwargs = fast_client_kwargs(verifier=run.verifier, penalty_base=PENALTY_BASE, on_state=on_state)
        kwargs.update(client_kwargs)
        pool = run.pool = RelayPool([honest.url, flood_url], **kwargs)
        await pool.start()
        try:
            assert await pool.wait_connected(10.0)
            sub = pool.subscribe([FILTER], lambda url, ev: run.got.add(ev.id))
            async with run.probe:
                await _publish_during_flood(run, pool, honest.url, flood_url, seconds)
                await eventually(lambda: {e.id for e in run.legit} <= run.got, 5.0)
            await sub.close()
        finally:
            await pool.close()
    return run, flood_url


async def _publish_during_flood(run: FloodRun, pool: RelayPool, honest_url: str, flood_url: str,
                                seconds: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    n = 0
    while loop.time() < end:
        ev = sign_event(SK, kind=1, content=f"legit {n}", created_at=int(time.time()) + n)
        started = loop.time()
        outcome = await pool.publish(ev, timeout=PUBLISH_TIMEOUT)
        elapsed = loop.time() - started
        if outcome.results[honest_url].accepted:
            run.legit.append(ev)
        else:
            run.honest_failures.append(outcome.results[honest_url])
        if outcome.results[flood_url].verdict is Verdict.TIMEOUT:
            run.flood_publish_s.append(elapsed)
        n += 1
        await asyncio.sleep(0.05)
