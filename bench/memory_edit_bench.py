"""Memory-change benchmark (#34): adding one line to a 30,000-character long-term memory, as the model does it with
``memory_insert`` and as it had to with ``memory_save``, through the whole agent, in one run.

    python bench/memory_edit_bench.py [--rounds 5] [--chars 30000]

The model is the scripted OpenAI-compatible stub (tests/llm_stub.py) over HTTP, through real litellm in its helper
process; the agent is the real service (AppService: the tool registry, the one save path, NIP-44, the embedded
relay). Each round runs two turns in new chats, in turn: one whose model adds a line with ``memory_insert`` (the
line only), one whose model adds a line with ``memory_save`` (the whole memory and the line: what a model had to
write before). The stub streams tool-call arguments in 7-character pieces, as a real server streams tokens.

Lines:
  memory_insert / memory_save   the characters (and offline-counted tokens) of the model's tool call, and seconds
                                from sending the message to the end of the turn (median of the rounds)
  call size                     insert / save, in characters (target <= 2%)
  exact                         every saved version, read back from the relay by a client of its own and decrypted,
                                is exactly the text before plus a line break and the new line
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

TARGET_RATIO = 0.02
WORDS = ("memory relay nostr agent tea Ada prefers short answers project deadline Friday the a of and review "
         "notes ship keys event signed encrypted kind tags").split()


def long_memory(chars: int) -> str:
    """A markdown memory of ``chars`` characters: headings and facts, one a line."""
    lines: list[str] = []
    n = 0
    while sum(len(line) + 1 for line in lines) < chars:
        if n % 12 == 0:
            lines.append(f"## Topic {n // 12 + 1}")
        else:
            lines.append("- " + " ".join(WORDS[(n * 5 + j) % len(WORDS)] for j in range(9)) + f" ({n}).")
        n += 1
    return "\n".join(lines)[:chars].rstrip()


async def run(rounds: int, chars: int) -> dict[str, Any]:
    from llm_stub import LlmStub, Reply, ToolCall
    from shared_relay_support import kill_shared_relays
    from tui_support import TEST_KEY, make_config, make_env

    from didactyl_tui.agent.documents.keys import DocumentKey
    from didactyl_tui.agent.llm import tokens
    from didactyl_tui.agent.turn.events import TurnFailed, TurnFinished
    from didactyl_tui.nostr import nip44
    from didactyl_tui.nostr.pool import RelayPool
    from didactyl_tui.service.app import AppService

    lt = DocumentKey.LONG_TERM
    conv = nip44.get_conversation_key(TEST_KEY.secret_hex(), TEST_KEY.public_key_hex)
    sizes: dict[str, list[int]] = {"memory_insert": [], "memory_save": []}
    toks: dict[str, list[int]] = {"memory_insert": [], "memory_save": []}
    times: dict[str, list[float]] = {"memory_insert": [], "memory_save": []}
    exact: list[bool] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            async with LlmStub() as stub:
                cfg = make_config(llm_base_url=stub.base_url, long_limit=max(32_000, chars + 2_000))
                cfg.llm.timeout_s = 60.0
                async with AppService(cfg, data_dir=Path(tmp), env=make_env()) as svc, \
                        RelayPool([svc.relays.embedded_url]) as reader:
                    await svc.documents.save(lt, long_memory(chars))
                    stub.script(Reply.text_reply("warm"))  # the helper's first call is not measured
                    [_ async for _ in svc.chat.run_turn(await svc.chat.new_session(), "hello")]
                    for r in range(rounds):
                        for tool in ("memory_insert", "memory_save"):
                            before = svc.documents.snapshot(lt).content
                            line = f"- fact {r} learnt with {tool}: Ada's cat is called Miso."
                            args = {"type": "long_term", "new_str": line} if tool == "memory_insert" else \
                                {"type": "long_term", "content": before + "\n" + line}
                            call = json.dumps(args, ensure_ascii=False)
                            stub.script(Reply.tools(ToolCall(tool, call)), Reply.text_reply("Noted."))
                            session = await svc.chat.new_session()
                            t0 = time.perf_counter()
                            events = [e async for e in svc.chat.run_turn(session, "My cat is called Miso.")]
                            times[tool].append(time.perf_counter() - t0)
                            end = events[-1]
                            if isinstance(end, TurnFailed) or not isinstance(end, TurnFinished):
                                raise SystemExit(f"the {tool} turn failed: {end}")
                            [done] = end.tool_calls
                            if done.is_error:
                                raise SystemExit(f"{tool} refused: {done.result}")
                            sent = json.dumps(done.arguments, ensure_ascii=False)
                            sizes[tool].append(len(sent))
                            toks[tool].append(tokens.count_here(sent))
                            held = await reader.query([{"authors": [TEST_KEY.public_key_hex], "kinds": [30078],
                                                        "#d": ["long_term_memory"]}], timeout=5)
                            saved = nip44.decrypt(max(held, key=lambda e: e.created_at).content, conv)
                            exact.append(saved == before + "\n" + line)
        finally:
            kill_shared_relays(Path(tmp))
    return {"sizes": sizes, "tokens": toks, "times": times, "exact": exact}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chars", type=int, default=30_000, help="the long-term memory's size")
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; "
          f"a {args.chars:,}-character long-term memory, one line added per turn, {args.rounds} rounds")
    result = asyncio.run(run(args.rounds, args.chars))
    med = {tool: (statistics.median(result["sizes"][tool]), statistics.median(result["tokens"][tool]),
                  statistics.median(result["times"][tool])) for tool in ("memory_insert", "memory_save")}
    for tool, (size, tok, secs) in med.items():
        print(f"{tool:<14} tool call {size:>8,.0f} chars {tok:>7,.0f} tok   turn {secs:6.2f} s")
    ratio = med["memory_insert"][0] / med["memory_save"][0]
    ok = ratio <= TARGET_RATIO
    print(f"{'call size':<14} insert / save {ratio:7.2%}   target <= {TARGET_RATIO:.0%}  {'ok' if ok else 'MISSED'}")
    print(f"{'turn time':<14} insert / save {med['memory_insert'][2] / med['memory_save'][2]:7.2f}x")
    exact = all(result["exact"])
    print(f"{'exact':<14} {sum(result['exact'])}/{len(result['exact'])} saved versions are the text before plus "
          f"the line  {'ok' if exact else 'MISSED'}")
    return 0 if ok and exact else 1


if __name__ == "__main__":
    sys.exit(main())
