"""A loop-lag probe: a task on the event loop under test that sleeps 10 ms again and again and
records how late each wake-up is. Lateness is time the loop spent on something else without
yielding, which is what a user feels as a frozen UI.

Two measures per wake-up: ``lags``, wall-clock lateness (what bench/ reports on a quiet machine), and
``cpu_lags``, the main thread's CPU time over the same sleep. A loop that blocks (verifying, parsing) burns
that CPU whatever the load; a process that a busy machine (2 shared cores) does not schedule does not, so
the tests judge ``cpu_lags``.

    async with LoopLagProbe() as probe:
        ...  # the work under test, on the same loop
    probe.percentile(95)  # seconds
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time


class LoopLagProbe:
    def __init__(self, interval: float = 0.010) -> None:
        self.interval = interval
        self.lags: list[float] = []  # seconds late, one per wake-up
        self.cpu_lags: list[float] = []  # the main thread's CPU seconds beyond the sleep, one per wake-up
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            start, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(self.interval)
            self.lags.append(max(0.0, time.perf_counter() - start - self.interval))
            self.cpu_lags.append(time.thread_time() - cpu)

    async def __aenter__(self) -> LoopLagProbe:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def percentile(self, p: float, *, cpu: bool = False) -> float:
        lags = self.cpu_lags if cpu else self.lags
        if len(lags) < 2:
            return lags[0] if lags else 0.0
        return statistics.quantiles(lags, n=100, method="inclusive")[int(p) - 1]

    def summary(self) -> str:
        if not self.lags:
            return "no samples"
        ms = [x * 1000 for x in self.lags]
        return (f"{len(ms)} samples, median {statistics.median(ms):.1f} ms, p95 {self.percentile(95) * 1000:.1f} ms,"
                f" max {max(ms):.1f} ms; CPU p95 {self.percentile(95, cpu=True) * 1000:.1f} ms,"
                f" max {max(self.cpu_lags) * 1000:.1f} ms")
