"""Direct messages in a burst: how long each sender waits, with conversations answered one at a time or in parallel.

    python bench/dm_bench.py [--senders 20] [--per-sender 10] [--turn 0.3] [--parallel 1,4,20]

20 senders (rust-nostr clients) each send 10 NIP-17 messages, round-robin, through the shared embedded relay to
an agent whose scripted model (tests/llm_stub.py) takes ``--turn`` seconds per turn. For each ``[dm]
max_parallel`` it prints, over the senders: the wait for their first reply (from their first message published
to its reply seen by their client) and for their last, median and worst, and the time for the whole burst.

With one conversation at a time, a sender's first reply waits for the other senders' turns (its wait grows with
the queue); with ``max_parallel`` >= senders it waits for its own turn only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


async def burst(senders: int, per_sender: int, turn_s: float, parallel: int) -> dict[str, float]:
    import nostr_sdk
    from agent_support import AGENT_KEY
    from dm_support import AGENT_ENV, dm_config
    from llm_stub import LlmStub, ReceivedRequest, Reply
    from relay_servers import fast_client_kwargs
    from shared_relay_support import kill_shared_relays

    from didactyl_tui.nostr.event import Event
    from didactyl_tui.nostr.kinds import GIFT_WRAP
    from didactyl_tui.nostr.pool import RelayPool
    from didactyl_tui.service.app import AppService

    def echo(request: ReceivedRequest) -> Reply:
        text = request.last_user_text
        return Reply.text_reply(f"re: {text}", chunks=[f"re: {text}"], pauses={0: turn_s})

    keys = [nostr_sdk.Keys.generate() for _ in range(senders)]
    hexes = [k.public_key().to_hex() for k in keys]
    agent = nostr_sdk.PublicKey.parse(AGENT_KEY.public_key_hex)
    sent: dict[str, float] = {}  # sender -> when their first message was published
    replies: dict[str, list[float]] = {pk: [] for pk in hexes}

    def seen(url: str, wrap: Event) -> None:
        replies[wrap.tag_values("p")[0]].append(time.monotonic())

    with tempfile.TemporaryDirectory() as tmp:
        try:
            async with LlmStub() as stub:
                stub.respond(echo)
                cfg = dm_config(stub.base_url, allow=hexes, max_parallel=parallel, max_queued=senders * per_sender)
                svc = AppService(cfg, data_dir=Path(tmp), answer_dms=True, env=AGENT_ENV,
                                 relay_client_options=fast_client_kwargs())
                async with svc, RelayPool([svc.relays.embedded_url], **fast_client_kwargs()) as pool:
                    pool.subscribe([{"kinds": [GIFT_WRAP], "#p": hexes}], seen)
                    await pool.wait_connected(5)
                    start = time.monotonic()
                    for k in range(per_sender):
                        for n, sender in enumerate(keys):
                            wrap = nostr_sdk.nip17_make_private_msg(sender, agent, f"{n}:{k}")
                            await pool.publish(Event.from_json(wrap.as_json()), timeout=5)
                            sent.setdefault(hexes[n], time.monotonic())
                    while sum(map(len, replies.values())) < senders * per_sender:
                        await asyncio.sleep(0.02)
                    total = time.monotonic() - start
        finally:
            kill_shared_relays(Path(tmp))
    first = [min(replies[pk]) - sent[pk] for pk in hexes]
    last = [max(replies[pk]) - sent[pk] for pk in hexes]
    return {"first_median": statistics.median(first), "first_worst": max(first),
            "last_median": statistics.median(last), "last_worst": max(last), "total": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--senders", type=int, default=20)
    parser.add_argument("--per-sender", type=int, default=10)
    parser.add_argument("--turn", type=float, default=0.3, help="seconds the scripted model takes per turn")
    parser.add_argument("--parallel", default="1,4,20", help="[dm] max_parallel values to compare")
    args = parser.parse_args()
    from didactyl_tui.agent.llm import client as llm

    llm.preload()  # litellm's import is paid before the first burst, not inside it
    print(f"{args.senders} senders x {args.per_sender} messages, {args.turn:g} s per turn")
    print(f"{'max_parallel':>12} {'first reply: median':>20} {'worst':>7} {'last reply: median':>19} {'worst':>7}"
          f" {'burst':>7}")
    for parallel in (int(p) for p in args.parallel.split(",")):
        r = asyncio.run(burst(args.senders, args.per_sender, args.turn, parallel))
        print(f"{parallel:>12} {r['first_median']:>19.2f}s {r['first_worst']:>6.2f}s {r['last_median']:>18.2f}s"
              f" {r['last_worst']:>6.2f}s {r['total']:>6.2f}s")


if __name__ == "__main__":
    main()
