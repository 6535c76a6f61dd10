"""Resume benchmark: a stored chat of 10 / 100 / 1,000 / 10,000 messages into the conversation pane.

    python bench/resume_bench.py [--sizes 10,100,1000,10000] [--repeat 3]

Headless (``App.run_test``), 130x40, the app's own stylesheet, the real ``Conversation`` widget. Each line is
the time from ``load_history(messages)`` to the first frame composed with the chat's end on screen (the last
entry laid out, its markdown parsed, the pane scrolled to the end); median of ``--repeat`` runs.

Lines:
  floor               one reply mounted into an empty pane and painted (the cost of any screen change)
  resume N            load_history of N messages (users, markdown replies, tool calls)   target: 1,000 <= 0.5 s,
                                                                                           10,000 <= 1 s
  old way N           the previous path, one awaited mount per message (reference, small N only)
  growth              resume 10,000 / resume 10 (1,000x the messages; sub-linear if far below 1,000)
Also checked (outside the timing): the last reply's text is on screen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult

from didactyl_tui.tui.widgets.conversation import Conversation
from didactyl_tui.tui.widgets.message_entry import MessageEntry

SIZE = (130, 40)
CSS = Path(__file__).resolve().parent.parent / "didactyl_tui" / "tui" / "app.tcss"

WORDS = ("memory relay nostr agent tea Ada prefers short answers project deadline Friday the a of and review "
         "notes ship keys event signed encrypted kind tags").split()


def sentence(seed: int, words: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(words)).capitalize() + "."


def reply_text(n: int) -> str:
    parts = [" ".join(sentence(n + i, 9 + i % 7) for i in range(3))]
    if n % 3 == 0:
        parts.append("\n".join(f"- {sentence(n + i, 6)}" for i in range(4)))
    if n % 4 == 1:
        parts.append("```python\n" + "\n".join(f"value_{i} = compute({i}, {n})" for i in range(5)) + "\n```")
    parts.append(sentence(n * 5, 12) + f" (reply {n})")
    return "\n\n".join(parts)


def stored_chat(count: int) -> list[dict[str, Any]]:
    """``count`` stored messages: user, assistant, and every 10th turn a tool call with its result."""
    out: list[dict[str, Any]] = []
    n = 0
    while len(out) < count:
        out.append({"role": "user", "content": sentence(n, 8 + n % 20) + f" (question {n})"})
        if n % 10 == 9 and len(out) + 3 <= count:
            call = {"id": f"call_{n}", "type": "function",
                    "function": {"name": "memory_save", "arguments": json.dumps({"content": sentence(n, 6)})}}
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            out.append({"role": "tool", "tool_call_id": f"call_{n}", "content": '{"ok": true}'})
        if len(out) < count:
            out.append({"role": "assistant", "content": reply_text(n)})
        n += 1
    return out[:count]


class Harness(App[None]):
    CSS_PATH = CSS

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[float] = []

    def compose(self) -> ComposeResult:
        yield Conversation(id="conversation")

    def _display(self, screen: Any, renderable: Any) -> None:
        if renderable is not None and not self._batch_count:  # a batch holds the frame back
            self.frames.append(time.perf_counter())
        super()._display(screen, renderable)


def end_on_screen(conversation: Conversation) -> bool:
    children = list(conversation.children)
    if not children:
        return False
    last = children[-1]
    if isinstance(last, MessageEntry):
        markdown = last.query("Markdown")
        if not markdown or not markdown.first().children:
            return False
    # A chat shorter than the pane is bottom-aligned by the anchor (scroll_y below zero).
    at_end = conversation.scroll_y >= conversation.max_scroll_y or conversation.max_scroll_y <= 0
    return last.region.height > 0 and at_end and last.region.bottom <= conversation.region.bottom


async def until_painted(app: Harness, conversation: Conversation, t0: float, timeout: float = 60.0) -> float:
    """Seconds from ``t0`` to the first frame composed after the chat's end is laid out on screen."""
    deadline = time.perf_counter() + timeout
    while not end_on_screen(conversation):
        if time.perf_counter() > deadline:
            raise TimeoutError("the end of the chat never reached the screen")
        await asyncio.sleep(0.002)
    seen = time.perf_counter()
    while not app.frames or app.frames[-1] < seen:
        if time.perf_counter() > deadline:
            raise TimeoutError("no frame after the chat's end was laid out")
        await asyncio.sleep(0.002)
    return next(t for t in app.frames if t >= seen) - t0


async def old_way(conversation: Conversation, messages: list[dict[str, Any]]) -> None:
    """The previous load_history: one awaited mount per message (kept here as the reference)."""
    await conversation.clear()
    for msg in messages:
        text = msg.get("content") or ""
        if msg["role"] == "user":
            await conversation.add_user(text)
        elif msg["role"] == "assistant":
            if text:
                await conversation.add_reply(text)
            for call in msg.get("tool_calls") or []:
                fn = call["function"]
                await conversation.tool_started(call["id"], fn["name"], json.loads(fn["arguments"]))


async def one_run(kind: str, count: int) -> float:
    app = Harness()
    messages = stored_chat(count)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        conversation = app.query_one(Conversation)
        t0 = time.perf_counter()
        if kind == "floor":
            await conversation.add_reply(reply_text(1))
        elif kind == "old":
            await old_way(conversation, messages)
        else:
            await conversation.load_history(messages)
        took = await until_painted(app, conversation, t0)
        await pilot.pause()
        if kind != "floor":
            last = messages[-1].get("content") or ""
            shown = conversation.children[-1]
            if isinstance(shown, MessageEntry) and shown.text != last:
                raise AssertionError(f"resume {count}: the last entry is not the last message")
    return took


def median_of(kind: str, count: int, repeat: int) -> float:
    return statistics.median(asyncio.run(one_run(kind, count)) for _ in range(repeat))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--old", default="10,100", help="sizes to time the old way (quadratic: keep small)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    old_sizes = [int(s) for s in args.old.split(",") if s]

    floor = median_of("floor", 1, args.repeat)
    print(f"{'floor (one reply painted)':32} {floor * 1000:9.1f} ms   1.0x")
    results: dict[int, float] = {}
    for count in sizes:
        took = median_of("resume", count, args.repeat)
        results[count] = took
        target = {1000: 0.5, 10000: 1.0}.get(count)
        verdict = "" if target is None else (f"  target <= {target:g} s: " + ("met" if took <= target else "MISSED"))
        print(f"{f'resume {count:,} messages':32} {took * 1000:9.1f} ms {took / floor:6.1f}x floor{verdict}")
    for count in old_sizes:
        took = median_of("old", count, max(1, args.repeat if count <= 100 else 1))
        new = results.get(count)
        vs = f"  ({took / new:.1f}x the batch)" if new else ""
        print(f"{f'old way {count:,} messages':32} {took * 1000:9.1f} ms {took / floor:6.1f}x floor{vs}")
    if len(results) >= 2:
        small, large = min(results), max(results)
        growth = results[large] / results[small]
        print(f"{f'growth {small:,} -> {large:,}':32} {growth:9.2f}x for {large // small:,}x the messages "
              + ("(sub-linear)" if growth < large / small else "(NOT sub-linear)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
