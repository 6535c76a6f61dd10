"""The DM inbox inside the service, under attack: a flood of strangers' wraps is bounded by [dm] max_queued
(the rest dropped and counted), none reaches the model, and an allow-listed sender is still answered."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from agent_support import AGENT_KEY, OTHER_KEY
from llm_stub import LlmStub, Reply
from relay_servers import fast_client_kwargs

from didactyl_tui.config import Config
from didactyl_tui.errors import ConfigError
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip17 import make_message, wrap_message
from didactyl_tui.service.app import AppService

pytestmark = pytest.mark.usefixtures("warm_litellm")
FRIEND = SecretKey.from_hex("6b" * 32)


def _wrap(sender: SecretKey, text: str, seed: int):
    now = int(time.time())
    rumor = make_message(sender.public_key_hex, [AGENT_KEY.public_key_hex], text, created_at=now)
    return wrap_message(rumor, sender, now=now, rng=random.Random(seed))[AGENT_KEY.public_key_hex]


def _config(base_url: str) -> Config:
    cfg = Config()
    cfg.relays.embedded_port, cfg.relays.timeout_s = 0, 2.0
    cfg.llm.model, cfg.llm.api_base, cfg.llm.api_key_env = "openai/stub-model", base_url, "STUB_KEY"
    cfg.memory.backend = "none"
    cfg.dm.allow = [FRIEND.npub]
    cfg.dm.max_queued = 4
    return cfg


async def test_a_flood_of_strangers_is_bounded_and_never_reaches_the_model(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        svc = AppService(_config(stub.base_url), data_dir=tmp_path, answer_dms=True,
                         env={"DIDACTYL_NSEC": AGENT_KEY.nsec(), "STUB_KEY": "sk"},
                         relay_client_options=fast_client_kwargs())
        async with svc:
            dm = svc.parts.dm
            for n in range(50):  # no await in between: the inbox cannot drain meanwhile
                dm._arrived("ws://test", _wrap(OTHER_KEY, f"stranger {n}", n))
            assert svc.dm.counts.get("dropped") == 46
            stub.script(Reply.text_reply("hello friend"))
            deadline = time.monotonic() + 30
            while svc.dm.counts.get("stranger", 0) < 4 and time.monotonic() < deadline:
                await _pause()
            dm._arrived("ws://test", _wrap(FRIEND, "hi from the allow-list", 99))
            # Our reply's own copy comes back through the subscription once the reply is published.
            while not svc.dm.counts.get("own_copy") and time.monotonic() < deadline:
                await _pause()
            counts = svc.dm.counts
            sessions = await svc.chat.sessions.list(include_empty=True)
    assert counts == {"stranger": 4, "dropped": 46, "answer": 1, "own_copy": 1}
    [request] = stub.requests
    assert "hi from the allow-list" in str(request.messages) and "stranger" not in str(request.messages)
    assert [s.title[:9] for s in sessions] == ["DM: npub1"]


def test_a_bad_allow_list_entry_is_a_config_error(tmp_path: Path) -> None:
    cfg = _config("http://127.0.0.1:9")
    cfg.dm.allow = ["npub1notakey"]
    with pytest.raises(ConfigError, match=r"\[dm\.allow\] 'npub1notakey'"):
        AppService(cfg, data_dir=tmp_path, env={"DIDACTYL_NSEC": AGENT_KEY.nsec()})


async def _pause() -> None:
    import asyncio

    await asyncio.sleep(0.02)


async def test_a_message_set_aside_by_a_full_queue_is_fetched_again_and_answered_once(tmp_path: Path) -> None:
    from didactyl_tui.nostr.pool import RelayPool

    slow_friend = SecretKey.from_hex("6c" * 32)
    async with LlmStub() as stub:
        cfg = _config(stub.base_url)
        cfg.dm.allow = [FRIEND.npub, slow_friend.npub]
        cfg.dm.max_queued, cfg.dm.max_parallel = 2, 1
        stub.script(Reply.text_reply("slow", chunks=["s", "low"], pauses={0: 3.0}), Reply.text_reply("one"),
                    Reply.text_reply("two"), Reply.text_reply("three"))
        svc = AppService(cfg, data_dir=tmp_path, answer_dms=True, env={"DIDACTYL_NSEC": AGENT_KEY.nsec(),
                         "STUB_KEY": "sk"}, relay_client_options=fast_client_kwargs())
        async with svc, RelayPool([svc.relays.embedded_url], **fast_client_kwargs()) as pool:
            dm = svc.parts.dm
            assert (await pool.publish(_wrap(slow_friend, "take your time", 1), timeout=3)).any_accepted
            deadline = time.monotonic() + 30
            while not stub.requests and time.monotonic() < deadline:  # the slow turn is under way
                await _pause()
            # Its conversation's next message takes the second place waiting; a third waits for room, holding
            # the inbox; two more wraps fill the inbox's queue.
            assert (await pool.publish(_wrap(slow_friend, "and then?", 2), timeout=3)).any_accepted
            assert (await pool.publish(_wrap(FRIEND, "hello", 3), timeout=3)).any_accepted
            while svc.dm.counts.get("answer", 0) < 3 and time.monotonic() < deadline:
                await _pause()
            for n in range(2):
                dm._arrived("ws://test", _wrap(OTHER_KEY, f"stranger {n}", 10 + n))
            # The friend's next message arrives live while everything is full: set aside, then fetched again.
            assert (await pool.publish(_wrap(FRIEND, "are you there?", 4), timeout=3)).any_accepted
            while len(stub.requests) < 4 and time.monotonic() < deadline:
                await _pause()
            counts = svc.dm.counts
    assert counts["dropped"] >= 1 and counts["answer"] == 4 and counts["stranger"] == 2
    asked = [r.last_user_text for r in stub.requests]
    assert sorted(asked) == sorted(["take your time", "and then?", "hello", "are you there?"])
    assert asked.index("take your time") < asked.index("and then?")  # one conversation: in order
