"""Memory with use (#34): the app's and the model helper's RSS over 20 long replies, each in a new chat.

    python bench/growth_bench.py [--replies 20] [--tokens 10000] [--path fast|public] [--trace]

The real app, headless (130x40), its real service and embedded relay, the model helper as for a user, and the
scripted OpenAI-compatible model (tests/llm_stub.py, in a process of its own, bench/stream_bench.py's) sending a
markdown reply of ``--tokens`` words as fast as it can. At a person's pace, as the issue measured it: the reply, then
a new chat and a second for the next message to be written. The RSS of the app and of its helper is read twice each
time: once the reply is painted (it is still on screen), and after the new chat that follows it, each time once the
collection the app puts off during a turn has run (and the keyboard is quiet). The app at rest is read before the
first message, with the helper started.

Lines:
  at rest            the app before any reply (the helper started, litellm imported there)
  reply N            the app with reply N on screen, then after the new chat that follows it, and the helper
  growth             the app after the last reply and its new chat, against at rest (target: at most +30 MiB);
                     beside it, with the last reply still on screen (what one long reply on screen holds)
  last half          the app's change over the last half of the replies, after their new chats (flat: within +3 MiB)
``--trace`` also prints what was allocated over the last half and is still held (tracemalloc, by line), and the
object types that grew (gc): where to look when the app grows. It slows the app and adds its own memory.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import stream_bench as sb  # noqa: E402  (the stub process, the app as the stream bench builds it)

GROWTH_TARGET_MIB = 30.0
FLAT_MIB = 3.0
WRITING_S = 1.0  # a new chat, then the next message is written: the chat just cleared is collected meanwhile


async def settled() -> None:
    """The collection put off by the turn has run (when the keyboard is quiet after it), and a moment more."""
    from didactyl_tui.tui.streaming import gc_pause

    deadline = time.monotonic() + 30
    while gc_pause.paused() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)


async def reply(app: Any, tokens: int) -> float:
    """One reply, then the new chat after it; the app's RSS while the reply was on screen."""
    await sb.tui_reply(app, tokens)
    await settled()
    on_screen = sb.rss_mib(os.getpid())
    await app.main_screen.action_new_chat()
    await asyncio.sleep(WRITING_S)
    await settled()
    return on_screen


def type_counts() -> collections.Counter[str]:
    return collections.Counter(type(o).__name__ for o in gc.get_objects())


async def run(base_url: str, replies: int, tokens: int, fast: bool, trace: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        app = sb.bench_app(base_url, data_dir, fast)
        async with app.run_test(size=sb.SIZE):
            await sb.wait(lambda: app.service_ready, 120, "the service to start")
            from didactyl_tui.agent.llm.worker_client import worker

            await asyncio.to_thread(app.service.model.warm_client)
            await asyncio.to_thread(worker().settled.wait, 120)
            await asyncio.sleep(2.0)
            rest = sb.rss_mib(os.getpid())
            print(f"{'at rest':<12} app {rest:6.1f} MiB   helper {sb.rss_mib(sb.helper_pid()):6.1f} MiB", flush=True)
            seen: list[float] = []
            shown: list[float] = []
            half = replies // 2
            snapshot = counts = None
            for n in range(1, replies + 1):
                shown.append(await reply(app, tokens))
                app_mib = sb.rss_mib(os.getpid())
                seen.append(app_mib)
                print(f"{f'reply {n}':<12} app {shown[-1]:6.1f} MiB on screen, {app_mib:6.1f} MiB after a new chat "
                      f"({app_mib - rest:+6.1f})   helper {sb.rss_mib(sb.helper_pid()):6.1f} MiB", flush=True)
                if trace and n == half:
                    tracemalloc.start(12)
                    gc.collect()
                    snapshot, counts = tracemalloc.take_snapshot(), type_counts()
            if trace and snapshot is not None and counts is not None:
                gc.collect()
                grown = type_counts() - counts
                print("object types grown over the last half:", grown.most_common(12))
                stats = tracemalloc.take_snapshot().compare_to(snapshot, "lineno")
                print(f"allocated over the last half and still held: {sum(s.size_diff for s in stats) / 2**20:.1f} MiB")
                for stat in stats[:15]:
                    print(f"  {stat.size_diff / 1024:8.0f} KiB  {stat.count_diff:+7d}  {stat.traceback[0]}")
    growth = seen[-1] - rest
    last_half = seen[-1] - seen[len(seen) // 2 - 1]
    print(f"{'growth':<12} {growth:+6.1f} MiB after {replies} replies of {tokens:,} tokens and a new chat   target <= "
          f"+{GROWTH_TARGET_MIB:g}  {'ok' if growth <= GROWTH_TARGET_MIB else 'MISSED'}   (the last reply on "
          f"screen: {shown[-1] - rest:+.1f})")
    print(f"{'last half':<12} {last_half:+6.1f} MiB over replies {len(seen) // 2}..{replies}   flat within "
          f"+{FLAT_MIB:g}  {'ok' if last_half <= FLAT_MIB else 'MISSED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--path", choices=("fast", "public"), default="fast")
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.path} path; {args.replies} replies of "
          f"{args.tokens:,} tokens, a new chat after each")
    stub = sb.StubProcess()
    try:
        asyncio.run(run(stub.base_url, args.replies, args.tokens, args.path == "fast", args.trace))
    finally:
        stub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
