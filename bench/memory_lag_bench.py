"""UI-loop lag during a memory save with a long history behind it.

    python bench/memory_lag_bench.py [--versions 1000] [--saves 10]

The service runs on one event loop, as in the TUI. A probe task asks to wake every 5 ms and notes the main
thread's CPU time between wake-ups (a loop held by a blocking call shows as a long stretch; a machine too
busy to schedule us does not). Two data dirs are measured in the same run:

  reference   a save with an empty memory history
  history     a save with --versions versions already in the history (SQLite, encrypted events)

Printed: the worst stretch of each (median over --saves saves) and their ratio. With every history read and
write on its worker thread the ratio stays near 1 whatever the history's size; on the loop it grows with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from didactyl_tui.agent.documents.history import DocumentHistory
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.config import Config
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.service.app import AppService

KEY = SecretKey.from_hex("7f" * 32)
T0 = int(time.time()) - 100_000


def seed_history(data: Path, versions: int) -> None:
    data.mkdir(parents=True, exist_ok=True)
    conv = nip44.get_conversation_key(KEY.secret_hex(), KEY.public_key_hex)
    history = DocumentHistory(data / "memory-history.sqlite3")
    try:
        for i in range(versions):
            text = f"version {i}: " + "notes " * 60
            ev = sign_event(KEY, kind=30078, content=nip44.encrypt(text, conv), created_at=T0 + i,
                            tags=[["d", "short_term_memory"], ["app", "didactyl"]])
            history.record(ev, "remote")
    finally:
        history.close()


class Probe:
    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            before = time.thread_time()
            await asyncio.sleep(0.005)
            self.worst = max(self.worst, time.thread_time() - before)

    def start(self) -> None:
        self.worst = 0.0
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> float:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return self.worst


def config() -> Config:
    cfg = Config()
    cfg.relays.embedded.enabled = True
    cfg.relays.embedded_port = 0
    cfg.relays.timeout_s = 3.0
    cfg.memory.backend = "none"
    cfg.agent.publish_profile = False
    return cfg


async def worst_stretches(data: Path, saves: int) -> list[float]:
    env = {"DIDACTYL_NSEC": KEY.nsec(), "HOME": str(data)}
    out = []
    async with AppService(config(), data_dir=data, env=env) as service:
        probe = Probe()
        for i in range(saves):
            probe.start()
            result = await service.documents.save(DocumentKey.SHORT_TERM, f"save {i}: " + "plan " * 200)
            await service.documents.pending_publishes()  # what the status bar asks after a save
            await asyncio.sleep(0.1)  # what follows a save: history record, outbox count
            out.append(await probe.stop())
            assert result.any_accepted, result.outcome.summary()
    return out


async def main(versions: int, saves: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        reference_dir, history_dir = Path(tmp) / "reference", Path(tmp) / "history"
        reference_dir.mkdir()
        t = time.perf_counter()
        seed_history(history_dir, versions)
        print(f"seeded {versions} history versions in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        reference = statistics.median(await worst_stretches(reference_dir, saves))
        history = statistics.median(await worst_stretches(history_dir, saves))
    print(f"UI-loop lag during a memory save (median of {saves}, worst stretch per save)")
    print(f"  reference (empty history)      {reference * 1000:7.1f} ms")
    print(f"  with {versions:,} history versions  {history * 1000:7.1f} ms")
    print(f"  ratio                          {history / max(reference, 1e-6):7.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=1000)
    parser.add_argument("--saves", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.versions, args.saves))
