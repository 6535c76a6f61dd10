"""Embedded relay benchmark: ours beside rust-nostr's relay (PyPI nostr-sdk), measured in the same run.

    python bench/relay_bench.py [--big 100000] [--quick]

Both relays run as processes of their own on loopback and are driven by the same Python websocket
client from this process, so client overhead is shared. Lines (ratio = ours / rust-nostr):

  pipelined publish       10,000 kind-1 events, up to 1,000 unanswered; events/s   target ours >= 0.5x rust
  publish -> OK p99       1,000 events one at a time                            target ours <= 1 ms
  REQ kind 1 limit 500    REQ to EOSE over the stored events, median of 30      target <= 1.5x rust
  author+kind+d lookup    one addressable event among 10k, then 100k events     target flat (growth ~1x)
  slow-reader attack      2 connections subscribe to everything and never read while a publisher
                          sends 8 KB events for a few seconds: its events/s and the relay's peak RSS
  permessage-deflate      REQ limit 500 and pipelined publish, ours with compression on / off

Ours runs with its default limits except the rate limits (events/s, bytes/min per connection and per
author), which are switched off here: at their defaults they would cap a single pipelining client
at 1,000 events + 200/s, which is the policy working, not the relay's speed. rust-nostr's LocalRelay
has no such limits. The machine is shared and noisy: read the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "attacks"))

from relay_process import RelayProcess, raw_ws, ws_frame  # noqa: E402

from didactyl_tui.nostr.event import Event, sign_event  # noqa: E402
from didactyl_tui.nostr.keys import SecretKey  # noqa: E402

T0 = int(time.time()) - 200_000
KEYS = [SecretKey.from_hex(f"{i + 1:064x}") for i in range(64)]
LOOKUP_D = "short_term_memory"
PER_CONNECTION = 5000


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def notes(n: int, *, start: int = 0, size: int = 40, key: SecretKey = KEYS[0]) -> list[Event]:
    pad = "x" * max(0, size - 20)
    return [sign_event(key, kind=1, content=f"note {start + i} {pad}", created_at=T0 + start + i, tags=[])
            for i in range(n)]


def addressables(n: int, *, start: int) -> list[Event]:
    """Addressable kind 30078 events over many authors and d values (one per author+d)."""
    out = []
    for i in range(n):
        key = KEYS[(start + i) % len(KEYS)]
        d = LOOKUP_D if (start + i) % 10 == 0 else f"slot{start + i}"
        out.append(sign_event(key, kind=30078, content=f"mem {start + i}", created_at=T0 + start + i,
                              tags=[["d", d]]))
    return out


async def connect(url: str, compression: bool = False) -> websockets.ClientConnection:
    return await websockets.connect(url, max_size=None, compression="deflate" if compression else None,
                                    ping_interval=None, open_timeout=10)


async def pipelined(url: str, events: list[Event], compression: bool = False, window: int = 1000) -> float:
    """Events/s for sending events without waiting for each OK, until the last OK. At most ``window``
    unanswered and 5,000 events per connection: rust-nostr's relay closes a connection after 6,000."""
    frames = [dumps(["EVENT", e.to_dict()]) for e in events]
    t0 = time.perf_counter()
    accepted = 0
    for start in range(0, len(frames), PER_CONNECTION):
        accepted += await _pipeline_one(url, frames[start:start + PER_CONNECTION], compression, window)
    elapsed = time.perf_counter() - t0
    if accepted != len(frames):
        print(f"  (warning: {len(frames) - accepted} of {len(frames)} events were not accepted)")
    return len(frames) / elapsed


async def _pipeline_one(url: str, frames: list[str], compression: bool, window: int) -> int:
    ws = await connect(url, compression)
    acked = accepted = 0
    room = asyncio.Event()
    try:
        async def read_oks() -> None:
            nonlocal acked, accepted
            for _ in frames:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 60))
                acked += 1
                accepted += msg[0] == "OK" and msg[2] is True
                room.set()

        reader = asyncio.create_task(read_oks())
        for sent, frame in enumerate(frames):
            while sent - acked >= window and not reader.done():
                room.clear()
                await _either(room, reader)
            if reader.done():
                break
            await ws.send(frame)
        await reader
    finally:
        await ws.close()
    return accepted


async def _either(room: asyncio.Event, reader: asyncio.Task[None]) -> None:
    waiter = asyncio.ensure_future(room.wait())
    await asyncio.wait([waiter, reader], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()


async def publish_p99(url: str, events: list[Event]) -> float:
    ws = await connect(url)
    times = []
    try:
        for e in events:
            frame = dumps(["EVENT", e.to_dict()])
            t0 = time.perf_counter()
            await ws.send(frame)
            await asyncio.wait_for(ws.recv(), 10)
            times.append(time.perf_counter() - t0)
    finally:
        await ws.close()
    times.sort()
    return times[int(len(times) * 0.99) - 1] * 1000


async def req_ms(url: str, flt: dict[str, Any], rounds: int, compression: bool = False) -> tuple[float, int]:
    """Median ms from REQ to EOSE, and the number of events received."""
    ws = await connect(url, compression)
    times, count = [], 0
    try:
        for r in range(rounds):
            t0 = time.perf_counter()
            await ws.send(dumps(["REQ", f"q{r}", flt]))
            count = 0
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if msg[0] == "EOSE":
                    break
                count += 1
            times.append(time.perf_counter() - t0)
            await ws.send(dumps(["CLOSE", f"q{r}"]))
    finally:
        await ws.close()
    return statistics.median(times) * 1000, count


class RssSampler:
    """Peak RSS of a process, sampled every 50 ms on a thread."""

    def __init__(self, relay: RelayProcess) -> None:
        self.relay = relay
        self.peak = relay.rss_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, self.relay.rss_mib())
            except OSError:
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def slow_reader_attack(relay: RelayProcess, events: list[Event], seconds: float) -> tuple[float, float, bool]:
    """(publisher events/s, peak RSS MiB, relay still serving) with 2 never-reading subscribers."""
    readers = []
    for _ in range(2):
        sock, _status = raw_ws(relay.url)
        sock.sendall(ws_frame(dumps(["REQ", "all", {}])))
        readers.append(sock)
    frames = [dumps(["EVENT", e.to_dict()]) for e in events]
    sent = acked = accepted = 0
    with RssSampler(relay) as rss:
        ws = await connect(relay.url)
        try:
            deadline = time.perf_counter() + seconds
            t0 = time.perf_counter()

            async def read_oks() -> None:
                nonlocal acked, accepted
                while acked < sent or sent < len(frames):
                    msg = json.loads(await ws.recv())
                    acked += msg[0] == "OK"
                    accepted += msg[0] == "OK" and msg[2] is True

            reader = asyncio.create_task(read_oks())
            for frame in frames:
                if time.perf_counter() > deadline:
                    break
                await ws.send(frame)
                sent += 1
                if sent - acked > 2000:
                    await asyncio.sleep(0.001)  # keep the window bounded (both relays alike)
            try:
                await asyncio.wait_for(asyncio.shield(reader), 10)
            except TimeoutError:
                reader.cancel()
            elapsed = time.perf_counter() - t0
        finally:
            await ws.close()
    for sock in readers:
        sock.close()
    serving = True
    try:
        await req_ms(relay.url, {"kinds": [1], "limit": 1}, 1)
    except Exception:
        serving = False
    if accepted != acked:
        print(f"  (warning: {acked - accepted} of {acked} events were not accepted)")
    return accepted / elapsed, rss.peak, serving


def line(metric: str, ours: str, rust: str, ratio: float | None, target: str, ok: bool | None) -> None:
    verdict = "" if ok is None else ("  ok" if ok else "  MISSED")
    ratio_text = "" if ratio is None else f"{ratio:6.2f}x"
    print(f"{metric:<34} {ours:>16} {rust:>16} {ratio_text:>8}   {target}{verdict}", flush=True)


async def run(args: argparse.Namespace) -> None:
    n_pipe = 2000 if args.quick else 10_000
    big = 20_000 if args.quick else args.big
    print(f"signing events ({n_pipe} + {big} + 11,000)...", flush=True)
    pipe_events = notes(n_pipe)
    p99_events = notes(1000, start=n_pipe)
    small_rest = addressables(1000, start=0)
    big_notes = notes(big - n_pipe - 2000, start=n_pipe + 1000, key=KEYS[1])
    big_addr = addressables(1000, start=1000)
    attack_events = notes(3000 if args.quick else PER_CONNECTION, start=150_000, size=8192, key=KEYS[2])
    lookup = {"authors": [KEYS[0].public_key_hex], "kinds": [30078], "#d": [LOOKUP_D]}
    print(f"{'':<34} {'ours':>16} {'rust-nostr':>16} {'ratio':>8}   target", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        ours = RelayProcess("embedded", Path(tmp) / "relay.sqlite3", rate_limits=False).start()
        rust = RelayProcess("rust", rate_limits=False).start()
        try:
            figures: dict[str, dict[str, float]] = {"ours": {}, "rust": {}}
            for name, relay in (("ours", ours), ("rust", rust)):
                f = figures[name]
                f["pipe"] = await pipelined(relay.url, pipe_events)
                f["p99"] = await publish_p99(relay.url, p99_events)
                await pipelined(relay.url, small_rest)
                f["req500"], f["req500_n"] = await req_ms(relay.url, {"kinds": [1], "limit": 500}, 30)
                f["look10k"], f["look_n"] = await req_ms(relay.url, lookup, 200)
            o, r = figures["ours"], figures["rust"]
            line(f"pipelined publish {n_pipe:,} (ev/s)", f"{o['pipe']:,.0f}", f"{r['pipe']:,.0f}",
                 o["pipe"] / r["pipe"], ">= 0.5x", o["pipe"] / r["pipe"] >= 0.5)
            line("publish -> OK p99 (ms)", f"{o['p99']:.2f}", f"{r['p99']:.2f}", o["p99"] / r["p99"],
                 "ours <= 1 ms", o["p99"] <= 1.0)
            line(f"REQ kind 1 limit 500 (ms, {o['req500_n']:.0f} ev)", f"{o['req500']:.2f}",
                 f"{r['req500']:.2f}", o["req500"] / r["req500"], "<= 1.5x", o["req500"] / r["req500"] <= 1.5)
            print(f"filling both relays to {big:,} events...", flush=True)
            for name, relay in (("ours", ours), ("rust", rust)):
                await pipelined(relay.url, big_notes)
                await pipelined(relay.url, big_addr)
                figures[name]["look100k"], _ = await req_ms(relay.url, lookup, 200)
            if o["look_n"] != 1 or r["look_n"] != 1:
                print(f"  (warning: the lookup found {o['look_n']:.0f} (ours), {r['look_n']:.0f} (rust) events)")
            for size, key in (("10k", "look10k"), (f"{big // 1000}k", "look100k")):
                line(f"author+kind+d lookup @{size} (ms)", f"{o[key]:.3f}", f"{r[key]:.3f}", o[key] / r[key],
                     "", None)
            growth_o, growth_r = o["look100k"] / o["look10k"], r["look100k"] / r["look10k"]
            line(f"  growth 10k -> {big // 1000}k", f"{growth_o:.2f}x", f"{growth_r:.2f}x", None,
                 "flat (<= 1.3x)", growth_o <= 1.3)
        finally:
            ours.stop()
            rust.stop()

        await attack_lines(tmp, attack_events, 2.0 if args.quick else 4.0)
        await deflate_lines(tmp, pipe_events)


async def attack_lines(tmp: str, events: list[Event], seconds: float) -> None:
    results = {}
    for name in ("ours", "rust"):
        relay = (RelayProcess("embedded", Path(tmp) / "attack.sqlite3", rate_limits=False) if name == "ours"
                 else RelayProcess("rust", rate_limits=False)).start()
        try:
            results[name] = await slow_reader_attack(relay, events, seconds)
        finally:
            relay.stop()
    (o_rate, o_rss, o_ok), (r_rate, r_rss, r_ok) = results["ours"], results["rust"]
    line("slow readers: publisher ev/s", f"{o_rate:,.0f}", f"{r_rate:,.0f}", o_rate / r_rate, "", None)
    line("slow readers: relay peak RSS (MiB)", f"{o_rss:.0f}", f"{r_rss:.0f}", o_rss / r_rss, "ours <= 300 MiB",
         o_rss <= 300)
    line("slow readers: still serving after", "yes" if o_ok else "NO", "yes" if r_ok else "NO", None, "", o_ok)


async def deflate_lines(tmp: str, events: list[Event]) -> None:
    figures = {}
    for compression in (False, True):
        relay = RelayProcess("embedded", Path(tmp) / f"deflate{int(compression)}.sqlite3", rate_limits=False,
                             compression=compression).start()
        try:
            rate = await pipelined(relay.url, events, compression)
            ms, _ = await req_ms(relay.url, {"kinds": [1], "limit": 500}, 30, compression)
            figures[compression] = (rate, ms)
        finally:
            relay.stop()
    (off_rate, off_ms), (on_rate, on_ms) = figures[False], figures[True]
    print(f"{'permessage-deflate (ours)':<34} {'off':>16} {'on':>16} {'on/off':>8}", flush=True)
    line("  pipelined publish (ev/s)", f"{off_rate:,.0f}", f"{on_rate:,.0f}", on_rate / off_rate, "", None)
    line("  REQ kind 1 limit 500 (ms)", f"{off_ms:.2f}", f"{on_ms:.2f}", on_ms / off_ms, "", None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", type=int, default=100_000, help="events for the second lookup point")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
