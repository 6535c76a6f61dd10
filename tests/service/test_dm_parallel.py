"""Conversations are answered in parallel, each in order: a burst of 200 messages from 20 senders (rust-nostr
clients, through the shared embedded relay) is answered once each, every sender's messages in the order sent,
and every sender's first reply arrives before any sender's last message is even given to the model — a
sender's wait depends on its own messages, not on the queue. The scripted model takes a fixed time per turn.
Timings are in bench/dm_bench.py; here only order and relations are asserted."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from agent_support import AGENT_KEY
from dm_support import AGENT_ENV, dm_config, until
from llm_stub import LlmStub, ReceivedRequest, Reply
from relay_servers import fast_client_kwargs

from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.kinds import GIFT_WRAP
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService

nostr_sdk = pytest.importorskip("nostr_sdk")
pytestmark = pytest.mark.usefixtures("warm_litellm")

SENDERS, PER_SENDER = 20, 10
TURN_S = 0.3  # the scripted model's time per turn: 10 turns in a row take 3 s


def echo(request: ReceivedRequest) -> Reply:
    text = request.last_user_text
    return Reply.text_reply(f"re: {text}", chunks=[f"re: {text}"], pauses={0: TURN_S})


async def test_200_messages_from_20_senders_are_answered_once_each_in_order_and_in_parallel(tmp_path: Path) -> None:
    senders = [nostr_sdk.Keys.generate() for _ in range(SENDERS)]
    agent = nostr_sdk.PublicKey.parse(AGENT_KEY.public_key_hex)
    hexes = [k.public_key().to_hex() for k in senders]
    arrived: dict[str, float] = {}  # reply wrap id -> when the test's client saw it
    wraps: list[Event] = []

    def reply_seen(url: str, wrap: Event) -> None:
        arrived[wrap.id] = time.monotonic()
        wraps.append(wrap)

    async with LlmStub() as stub:
        stub.respond(echo)
        cfg = dm_config(stub.base_url, allow=hexes, max_parallel=SENDERS, max_queued=256)
        svc = AppService(cfg, data_dir=tmp_path, answer_dms=True, relay_client_options=fast_client_kwargs(),
                         env=AGENT_ENV)
        async with svc, RelayPool([svc.relays.embedded_url], **fast_client_kwargs()) as pool:
            sub = pool.subscribe([{"kinds": [GIFT_WRAP], "#p": hexes}], reply_seen)
            assert await pool.wait_connected(5)
            for k in range(PER_SENDER):  # round-robin, each publish acknowledged: the relay keeps this order
                for n, keys in enumerate(senders):
                    wrap = Event.from_json(nostr_sdk.nip17_make_private_msg(keys, agent, f"{n}:{k}").as_json())
                    assert (await pool.publish(wrap, timeout=5)).any_accepted
            deadline = time.monotonic() + 120
            while len(wraps) < SENDERS * PER_SENDER:
                assert time.monotonic() < deadline, f"{len(wraps)} replies of {SENDERS * PER_SENDER}"
                await asyncio.sleep(0.05)
            # The relay shows a reply to its readers before the agent has its OK: wait for the ledger too.
            status = await until(lambda: _all_delivered(svc), 30, "every message marked delivered")
            await sub.close()

    # Each message reached the model once, and each sender's in the order sent.
    asked = [r.last_user_text for r in sorted(stub.requests, key=lambda r: r.at)]
    assert sorted(asked) == sorted(f"{n}:{k}" for n in range(SENDERS) for k in range(PER_SENDER))
    for n in range(SENDERS):
        assert [t for t in asked if t.split(":")[0] == str(n)] == [f"{n}:{k}" for k in range(PER_SENDER)]
    # Each sender got one reply per message, answering that message.
    replies: dict[int, list[tuple[str, str]]] = {n: [] for n in range(SENDERS)}
    for wrap in wraps:
        n = hexes.index(wrap.tag_values("p")[0])
        gift = nostr_sdk.UnwrappedGift.from_gift_wrap(senders[n], nostr_sdk.Event.from_json(wrap.to_json()))
        answered = [t.to_vec()[1] for t in gift.rumor().tags() if t.to_vec()[0] == "e"]
        replies[n].append((gift.rumor().content(), answered[0]))
        assert gift.sender().to_hex() == AGENT_KEY.public_key_hex
    for n in range(SENDERS):
        assert sorted(text for text, _ in replies[n]) == sorted(f"re: {n}:{k}" for k in range(PER_SENDER))
        assert len({message for _, message in replies[n]}) == PER_SENDER
    assert status.messages == {"delivered": SENDERS * PER_SENDER}
    # Every sender's first reply arrived before any sender's last message was given to the model: nobody
    # waited for the other senders' turns.
    first_reply = {n: min(arrived[w.id] for w in wraps if w.tag_values("p")[0] == hexes[n]) for n in range(SENDERS)}
    last_turn = {n: next(r.at for r in stub.requests if r.last_user_text == f"{n}:{PER_SENDER - 1}")
                 for n in range(SENDERS)}
    assert max(first_reply.values()) < min(last_turn.values())


async def _all_delivered(svc: AppService):
    status = await svc.dm.status()
    return status if status is not None and status.messages.get("delivered") == SENDERS * PER_SENDER else None
