"""Streaming benchmark: a reply of 1,250 / 5,000 / 10,000 tokens to its last token on screen, and key echo.

    python bench/stream_bench.py [--sizes 1250,5000,10000] [--repeat 3] [--keys 150]

The LLM is the OpenAI-compatible stub (tests/llm_stub.py) in its own process, sending one word per chunk as
fast as it can. Each reply is markdown: paragraphs, lists, headings and fenced code, blocks spanning chunks.

Lines:
  raw litellm N        litellm.acompletion(stream=True) consuming the same stream, nothing else (the floor)
  tui N                the real app (headless, 130x40, real service, embedded relay): from send to the first
                       frame composed after the reply's last token is painted; ratio to raw litellm
                       (target for 10,000: <= 1.25x). The painted text is checked against the full reply.
                       litellm runs in the app's helper process ([llm] worker_process, the default), as
                       for a user; the stub, the helper and the app share this machine's two cores.
  echo idle            keystroke -> first frame showing the character, nothing streaming
  echo streaming N     the same while the largest reply streams (target p95 <= 50 ms)
Keys are injected from a thread through the driver, as a terminal's input thread does, every 40 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

SIZE = (130, 40)
KEY_INTERVAL_S = 0.04
WARM_TOKENS = 50
WORDS = ("memory relay nostr agent tea Ada prefers short answers project deadline Friday the a of and review "
         "notes ship keys event signed encrypted kind tags").split()


def reply_of(tokens: int) -> str:
    """A markdown reply of about ``tokens`` words (one stub chunk each)."""
    blocks: list[str] = []
    count = n = 0
    while count < tokens:
        kind = n % 6
        if kind == 0:
            text = f"## Part {n // 6 + 1}"
        elif kind == 3:
            text = "\n".join(f"- {' '.join(WORDS[(n + i * 5 + j) % len(WORDS)] for j in range(7))}"
                             for i in range(4))
        elif kind == 5:
            text = "```python\n" + "\n".join(f"value_{i} = compute({i}, {n})  # step {i}" for i in range(6)) + "\n```"
        else:
            text = " ".join(WORDS[(n * 3 + j) % len(WORDS)] for j in range(60)) + "."
        blocks.append(text)
        count += text.count(" ") + 1
        n += 1
    return "\n\n".join(blocks)


# --- the stub in its own process ----------------------------------------------------------------------------


def serve(sizes: list[int]) -> None:
    """Child process: script one reply per size, in order, print the port, serve until stdin closes."""
    from llm_stub import LlmStub, Reply

    async def run() -> None:
        async with LlmStub() as stub:
            stub.script(*(Reply.text_reply(reply_of(n)) for n in sizes))
            print(stub.port, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(run())


class StubProcess:
    def __init__(self, sizes: list[int]) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", ",".join(map(str, sizes))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.base_url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}/v1"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


# --- the floor: litellm alone ---------------------------------------------------------------------------------


async def raw_litellm(base_url: str) -> tuple[float, str]:
    import litellm

    t0 = time.perf_counter()
    stream = await litellm.acompletion(model="openai/stub-model", api_base=base_url, api_key="sk-bench",
                                       messages=[{"role": "user", "content": "go"}], stream=True,
                                       stream_options={"include_usage": True}, max_retries=0, timeout=60)
    parts: list[str] = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return time.perf_counter() - t0, "".join(parts)


# --- the app --------------------------------------------------------------------------------------------------


def bench_app(base_url: str, data_dir: Path) -> Any:
    from tui_support import LabelledApp, make_config, make_env

    from didactyl_tui.service.app import AppService

    class TimedApp(LabelledApp):
        """The real app, noting when each frame is composed and when a typed key first shows."""

        frames: list[float] = []
        keys_sent: deque[tuple[float, int]] = deque()  # (when, input length that shows it), oldest first
        echoes: list[float] = []

        def _display(self, screen: Any, renderable: Any) -> None:
            if renderable is not None and not self._batch_count:  # a batch holds the frame back
                now = time.perf_counter()
                self.frames.append(now)
                if self.keys_sent:
                    shown = len(self.main_screen.chat_input.text)
                    while self.keys_sent and self.keys_sent[0][1] <= shown:
                        self.echoes.append(now - self.keys_sent.popleft()[0])
            super()._display(screen, renderable)

    config = make_config(llm_base_url=base_url)
    config.llm.timeout_s = 60.0
    env = make_env()
    service = AppService(config, data_dir=data_dir, env=env)
    app = TimedApp(config, data_dir=data_dir, env=env, service=service)
    app.frames, app.echoes, app.keys_sent = [], [], deque()
    return app


async def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.002)


def painted_text(entry: Any) -> str:
    """What the entry has painted; an older MessageEntry (run against another checkout for a before/after)
    has no ``painted_text``: its Markdown's source is the closest (it leads the paint by one append)."""
    if hasattr(entry, "painted_text"):
        return entry.painted_text
    return entry.markdown.source


async def tui_reply(app: Any, expected: str) -> float:
    """Send a message; seconds to the first frame after the reply's last token is painted."""
    from didactyl_tui.tui.widgets.message_entry import MessageEntry

    main = app.main_screen
    await main.action_new_chat()
    await asyncio.sleep(0.2)
    t0 = time.perf_counter()
    main.send("go")

    found: list[MessageEntry] = []

    def painted() -> bool:
        if not found:  # looked up once: the check runs every few milliseconds
            found.extend(e for e in main.conversation.query(MessageEntry) if e.role == "assistant")
            if not found:
                return False
        return not found[-1].streaming and painted_text(found[-1]) == expected

    try:
        await wait(painted, 60, "the reply to be painted")
    except TimeoutError:
        shown = painted_text(found[-1]) if found else None
        raise TimeoutError(f"reply not painted: {len(shown or '')} of {len(expected)} chars; "
                           f"{(shown or '')[-80:]!r} vs {expected[-80:]!r}") from None
    seen = time.perf_counter()
    await wait(lambda: app.frames[-1] >= seen, 10, "a frame after the reply")
    took = next(t for t in app.frames if t >= seen) - t0
    await wait(lambda: not main.streaming, 30, "the turn to end")
    return took


def type_keys(app: Any, loop: asyncio.AbstractEventLoop, count: int, stop: threading.Event) -> None:
    """A terminal's input thread: one key every KEY_INTERVAL_S, through the driver."""
    from textual import events

    start_len = len(app.main_screen.chat_input.text)
    for i in range(count):
        if stop.is_set():
            return
        time.sleep(KEY_INTERVAL_S)
        char = "abcdefghij"[i % 10]

        def send(n: int = i, c: str = char) -> None:
            app.keys_sent.append((time.perf_counter(), start_len + n + 1))
            app._driver.process_message(events.Key(c, c))

        loop.call_soon_threadsafe(send)


async def echo_run(app: Any, keys: int, streaming: bool) -> list[float]:
    """Echo times of keys typed while idle, or while a reply streams (typing stops when it ends)."""
    main = app.main_screen
    await main.action_new_chat()
    main.chat_input.clear()
    main.chat_input.focus()
    await asyncio.sleep(0.2)
    app.echoes.clear()
    app.keys_sent.clear()
    stop = threading.Event()
    if streaming:
        main.send("go")
        await wait(lambda: main.status.activity == "writing…", 60, "the reply to start")
    typist = threading.Thread(target=type_keys, args=(app, asyncio.get_running_loop(), keys, stop))
    typist.start()
    try:
        if streaming:
            await wait(lambda: not main.streaming or not typist.is_alive(), 120, "the reply to end")
            stop.set()
        await wait(lambda: not typist.is_alive(), 120, "the typist")
        await asyncio.sleep(0.3)
    finally:
        stop.set()
    main.chat_input.clear()
    await wait(lambda: not main.streaming, 120, "the reply to end")
    return list(app.echoes)


def spread(name: str, samples: list[float]) -> str:
    if len(samples) < 2:
        return f"{name:28} too few samples"
    qs = statistics.quantiles(samples, n=20, method="inclusive")
    return (f"{name:28} median {statistics.median(samples) * 1000:6.1f} ms  p90 {qs[17] * 1000:6.1f}  "
            f"p95 {qs[18] * 1000:6.1f}  max {max(samples) * 1000:6.1f}  ({len(samples)} keys)")


async def tui_runs(base_url: str, sizes: list[int], repeat: int, keys: int) -> tuple[dict[int, list[float]], ...]:
    from textual.widgets import Markdown

    with tempfile.TemporaryDirectory() as tmp:
        app = bench_app(base_url, Path(tmp))
        async with app.run_test(size=SIZE):
            await wait(lambda: app.service_ready, 60, "the service to start")
            await asyncio.sleep(0.5)
            await tui_reply(app, reply_of(WARM_TOKENS))  # the first turn loads the tokenizer and friends
            times: dict[int, list[float]] = {n: [] for n in sizes}
            for n in sizes:
                for _ in range(repeat):
                    times[n].append(await tui_reply(app, reply_of(n)))
            idle = await echo_run(app, keys, False)
            streaming = await echo_run(app, keys, True)
            blocks = len(app.main_screen.conversation.query(Markdown).last().children)
    return times, {0: idle, 1: streaming, 2: [blocks]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1250,5000,10000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keys", type=int, default=400, help="at most this many keys per echo line")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve([int(s) for s in args.serve.split(",")])
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s]

    from didactyl_tui.agent.llm import client as llm

    llm.preload()
    order = [n for n in sizes for _ in range(args.repeat + 1)]  # raw runs (one warm-up), then the app's
    order += [WARM_TOKENS] + [n for n in sizes for _ in range(args.repeat)] + [max(sizes)]
    stub = StubProcess(order)
    try:
        raw: dict[int, list[float]] = {}
        for n in sizes:
            asyncio.run(raw_litellm(stub.base_url))  # warm-up: the first call imports the HTTP stack
            for _ in range(args.repeat):
                took, text = asyncio.run(raw_litellm(stub.base_url))
                if text != reply_of(n):
                    raise AssertionError("raw litellm did not receive the whole reply")
                raw.setdefault(n, []).append(took)
        times, echo = asyncio.run(tui_runs(stub.base_url, sizes, args.repeat, args.keys))
    finally:
        stub.close()
    for n in sizes:
        r, t = statistics.median(raw[n]), statistics.median(times[n])
        print(f"{f'raw litellm {n:,} tokens':28} {r:7.2f} s")
        target = "  target <= 1.25x: " + ("met" if t / r <= 1.25 else "MISSED") if n == 10000 else ""
        print(f"{f'tui {n:,} tokens':28} {t:7.2f} s  {t / r:5.2f}x raw litellm{target}")
    print(spread("echo idle", echo[0]))
    print(spread(f"echo streaming {max(sizes):,} tok", echo[1]))
    p95 = statistics.quantiles(echo[1], n=20, method="inclusive")[18] if len(echo[1]) >= 2 else float("inf")
    print(f"{'echo p95 target <= 50 ms':28} " + ("met" if p95 <= 0.05 else "MISSED")
          + f"   (streaming p95 / idle median {p95 / statistics.median(echo[0]):.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
