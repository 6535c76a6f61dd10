"""Prompt history at every size: ``ConversationStore.history_for_prompt`` over 10 / 100 / 1,000 / 10,000 turns.

    python bench/history_bench.py [--rounds 30]

Each line is the median time to pick the prompt's history (a 4,000-token budget over ~450-token turns: the
same ~16 newest messages at every size), and its ratio to the 10-turn conversation measured in the same run.
The goal (issue #13) is a flat line: the cost follows what the prompt keeps, not how long the chat grew.
A second column shows the same rule applied to every stored message (``messages()`` + the selection in
memory), the way it was done before the windowed read, as the reference that grows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from didactyl_tui.agent.conversations.store import ConversationStore
from didactyl_tui.agent.conversations.turns import group_turns, repair_tool_pairs
from didactyl_tui.agent.llm import tokens

SIZES = (10, 100, 1_000, 10_000)
MODEL = "openai/gpt-4o-mini"
BUDGET = 4000  # with ~450-token turns the window (~16 messages) is already full at 10 stored turns


def fill(store: ConversationStore, turns: int) -> str:
    session = store.new_session()
    batch = []
    for n in range(turns):
        batch += [{"role": "user", "content": f"Question {n}: how does the thing number {n} work, briefly?"},
                  {"role": "assistant", "content": f"Answer {n}: " + "it works well enough in practice. " * 60}]
    store.append(session, batch)
    return session


def whole_read(store: ConversationStore, session: str) -> list[dict]:
    """Every stored message, then the newest turns that fit (the pre-window way)."""
    kept: list[list[dict]] = []
    used = 0
    for turn in reversed(group_turns(repair_tool_pairs(store.messages(session)))):
        cost = sum(tokens.PER_MESSAGE_OVERHEAD + tokens.count_tokens(MODEL, tokens.message_text(m)) for m in turn)
        if used + cost > BUDGET:
            break
        kept.append(turn)
        used += cost
    return [m for turn in reversed(kept) for m in turn]


def median_ms(fn, rounds: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for size in SIZES:
            store = ConversationStore(Path(tmp) / f"c{size}.sqlite3")
            session = fill(store, size)
            kept, _ = store.history_for_prompt(session, MODEL, BUDGET)
            assert kept == whole_read(store, session)
            window = median_ms(lambda s=store, sid=session: s.history_for_prompt(sid, MODEL, BUDGET), args.rounds)
            whole = median_ms(lambda s=store, sid=session: whole_read(s, sid), max(3, args.rounds // 5))
            rows.append((size, len(kept), window, whole))
            store.close()
    base_window, base_whole = rows[0][2], rows[0][3]
    print(f"token counter: {tokens.counter_backend()}; budget {BUDGET:,} tokens")
    print(f"{'stored turns':>12} {'kept msgs':>9} {'windowed ms':>12} {'vs 10':>7} {'whole-read ms':>14} {'vs 10':>7}")
    for size, kept_n, window, whole in rows:
        print(f"{size:>12,} {kept_n:>9} {window:>12.3f} {window / base_window:>6.2f}x {whole:>14.3f} "
              f"{whole / base_whole:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
