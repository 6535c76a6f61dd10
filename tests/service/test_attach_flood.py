"""``didactyl attach`` under a flood of gift wraps from strangers, over real relays (ours, and rust-nostr's).

Anyone may publish gift wraps addressed to the admin, each from a throwaway key. Before #30 a flood of 1,000 left a
fresh attach with no history (the newest wraps filled the history query's ``limit``), and during a flood of 600 the
attach inbox's bounded queue dropped the agent's reply and its prompt report with the spam. Here the spam is made with
the pure NIP-59 functions (~0.2 s per 1,000) and published over a few connections; each test waits for facts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from dm_support import AGENT_ENV, dm_config, until
from llm_stub import LlmStub, Reply
from nip46_bunker import ScriptedBunker
from relay_servers import fast_client_kwargs, free_port
from wrap_flood_support import SPAM_TEXT, publish_all, spam_wraps

from didactyl_tui.agent.dm.prompt_report import report_content, report_rumor
from didactyl_tui.agent.soul.prompt_record import PromptAssembly, PromptLayer
from didactyl_tui.agent.turn.events import TurnFinished
from didactyl_tui.config import Config
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.nip17 import gift_wrap_filter, make_message, wrap_message
from didactyl_tui.nostr.nip59 import Rumor, unwrap, wrap_with_rng
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import PromptAssembled, ServiceEvent, ServiceWarning

pytestmark = pytest.mark.usefixtures("warm_litellm")
ADMIN_ENV = {"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec()}
ADMIN, AGENT = ADMIN_KEY.public_key_hex, AGENT_KEY.public_key_hex


@pytest.fixture(params=["embedded", "rust-nostr"])
async def relay_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """Ours (its default limits: 1,000 events at once per connection), or rust-nostr's told to take 100,000 events a
    minute per connection (its default, 60, would refuse the flood before attach sees it: a stranger would then use
    more connections; the test keeps its order by using one)."""
    if request.param == "embedded":
        async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
            yield relay.url
        return
    from nostr_sdk import LocalRelayBuilder, RateLimit

    port = free_port()
    relay = LocalRelayBuilder().addr("127.0.0.1").port(port).rate_limit(
        RateLimit(max_reqs=500, notes_per_minute=100_000)).build()
    await relay.run()
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        relay.shutdown()


class MovingClock:
    """The real time plus a shift the test moves on: each exchange of the conversation in its own seconds."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift


def _attached_config(url: str, **attach: object) -> Config:
    cfg = Config()
    cfg.relays.embedded.enabled, cfg.relays.urls, cfg.relays.timeout_s = False, [url], 5.0
    cfg.memory.backend = "none"
    cfg.attach.agent = AGENT_KEY.npub
    cfg.attach.relays = [url]  # where the agent (a client here, with no kind 10050) reads
    for key, value in attach.items():
        setattr(cfg.attach, key, value)
    return cfg


def _attached(cfg: Config, data: Path, clock: Callable[[], float] = time.time) -> tuple[AppService,
                                                                                      list[ServiceEvent]]:
    svc = AppService(cfg, data_dir=data, env=ADMIN_ENV, clock=clock, relay_client_options=fast_client_kwargs())
    seen: list[ServiceEvent] = []
    svc.add_listener(seen.append)
    return svc, seen


def _served_agent(url: str, base_url: str, data: Path, clock: Callable[[], float]) -> AppService:
    return AppService(dm_config(base_url, urls=[url], admin=ADMIN_KEY.npub), data_dir=data, env=AGENT_ENV,
                      clock=clock, answer_dms=True, relay_client_options=fast_client_kwargs())


async def test_a_fresh_attach_shows_the_conversation_through_1000_spam_wraps(relay_url: str, tmp_path: Path) -> None:
    clock = MovingClock()
    async with LlmStub() as stub:
        stub.script(*(Reply.text_reply(f"answer {n}") for n in range(3)))
        laptop, _ = _attached(_attached_config(relay_url), tmp_path / "laptop", clock)
        async with _served_agent(relay_url, stub.base_url, tmp_path / "server", clock), laptop:
            for n in range(3):
                events = [e async for e in laptop.chat.run_turn(laptop.chat.session_id, f"question {n}")]
                assert isinstance(events[-1], TurnFinished), events[-1]
                clock.shift += 5
    conversation = [(role, f"{word} {n}") for n in range(3) for role, word in (("user", "question"),
                                                                                ("assistant", "answer"))]
    # 1,000 wraps for the admin from throwaway keys, each dated after every wrap of the conversation (those are
    # backdated up to two days, NIP-59): a query's newest 800 held nothing else.
    spam = spam_wraps(ADMIN, 1_000, created_at=int(clock()) + 60, spread_s=250)
    await publish_all(relay_url, spam, connections=4)

    fresh, _ = _attached(_attached_config(relay_url), tmp_path / "another laptop")
    async with fresh:
        chat = fresh.chat
        shown = [(m["role"], m["content"]) for m in await chat.session_messages(chat.session_id)]
        assert shown == conversation
        # Every wrap of the flood was judged by its seal's author and dropped there, none opened further.
        assert chat.link.strangers == 1_000 and chat.link.history_cut == ""


def _assembly() -> PromptAssembly:
    layer = PromptLayer("soul", "system", None, "You are the served agent.", 7)
    return PromptAssembly(model="stub-model", created_at=time.time(), layers=(layer,), history=(),
                          history_dropped=0, backend_id=None, backend_context=None, backend_tokens=0,
                          user_message=None, tools=(), messages=(), total_tokens=7)


class AgentElsewhere:
    """The agent, played by another Nostr client holding its key: it answers the admin's first message with a reply
    and a prompt report sent inside a stream of spam wraps for the admin (``before`` of them first, in one pipelined
    stream on one connection, so a relay hands them on in that order)."""

    def __init__(self, url: str, spam: list[Event], before: int) -> None:
        self.url, self.spam, self.before = url, spam, before
        self.asked: asyncio.Future[Rumor] = asyncio.get_running_loop().create_future()
        self.reply_text = "the reply, through the flood"

    def _seen(self, url: str, wrap: Event) -> None:
        rumor = unwrap(wrap, AGENT_KEY).rumor
        if rumor.pubkey == ADMIN and not self.asked.done():
            self.asked.set_result(rumor)

    async def answer(self) -> None:
        async with RelayPool([self.url], **fast_client_kwargs()) as pool:
            await pool.wait_connected(5)
            pool.subscribe([gift_wrap_filter(AGENT, since=0)], self._seen)
            message = await self.asked
            now = int(time.time())
            reply = make_message(AGENT, [ADMIN], self.reply_text, created_at=now, reply_to=message.id)
            reply_wrap = wrap_message(reply, AGENT_KEY, now=now, copy_to_self=False)[ADMIN]
            report = report_rumor(AGENT, ADMIN, reply.id, report_content(_assembly()), created_at=now)
            report_wrap = wrap_with_rng(report, AGENT_KEY, ADMIN, now=now)
            stream = [*self.spam[:self.before], reply_wrap, report_wrap, *self.spam[self.before:]]
            outcomes = await asyncio.gather(*(pool.publish(w, 30) for w in stream))
            assert all(o.any_accepted for o in outcomes), [o.summary() for o in outcomes if not o.any_accepted][:1]


@pytest.mark.parametrize("max_waiting", [4096, 16], ids=["default intake", "intake overflows: catch-up"])
async def test_the_agents_reply_and_report_inside_a_flood_of_600_show(relay_url: str, tmp_path: Path,
                                                                     max_waiting: int) -> None:
    # The reply and its prompt report come after 300 spam wraps and before 300 more. With an intake of 16 most of
    # the flood (and likely the reply) is refused as it comes, and read back from the relay once the intake drains.
    cfg = _attached_config(relay_url, reply_timeout_s=120.0, report_wait_s=120.0, max_waiting=max_waiting)
    laptop, seen = _attached(cfg, tmp_path / "laptop")
    async with laptop:
        spam = spam_wraps(ADMIN, 600, created_at=int(time.time()), spread_s=150)
        agent = AgentElsewhere(relay_url, spam, before=300)
        answering = asyncio.create_task(agent.answer())
        events = [e async for e in laptop.chat.run_turn(laptop.chat.session_id, "are you there?")]
        await answering
        assert isinstance(events[-1], TurnFinished), events[-1]
        assert events[-1].reply == agent.reply_text
        [assembled] = [e.assembly for e in seen if isinstance(e, PromptAssembled)]
        assert [layer.content for layer in assembled.layers] == ["You are the served agent."]
        link = laptop.chat.link
        await until(lambda: link.strangers == 600, 60, "every spam wrap judged")
        if max_waiting == 16:
            assert link.dropped > 0  # the intake did overflow, and what it refused was read back
        texts = [m["content"] for m in await laptop.chat.session_messages(laptop.chat.session_id)]
        assert texts == ["are you there?", agent.reply_text] and not any(SPAM_TEXT in t for t in texts)


@pytest.mark.parametrize("bound", [{"history_max_pages": 1}, {"history_max_bytes": 64 * 1024}],
                         ids=["pages", "bytes"])
async def test_a_history_read_ended_by_its_bound_says_so(tmp_path: Path, bound: dict[str, int]) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        await publish_all(relay.url, spam_wraps(ADMIN, 1_000, created_at=int(time.time()), spread_s=250))
        laptop, seen = _attached(_attached_config(relay.url, **bound), tmp_path / "laptop")
        async with laptop:
            [key] = bound
            assert laptop.chat.link.history_cut == key.removeprefix("history_max_")
            [warning] = [e.message for e in seen if isinstance(e, ServiceWarning) and "only in part" in e.message]
            assert f"[attach] {key}" in warning
            assert 0 < laptop.chat.link.strangers < 1_000


class SteadyFlood:
    """A stranger publishing wraps for the admin in small batches, on and on, until at least ``count`` are out and
    the agent's reply has been seen on the relay (by a client reading the admin's wraps with its key): the reply
    lands inside the flood, whenever the agent sends it. ``under_way`` is set once half of ``count`` are out."""

    def __init__(self, url: str, count: int) -> None:
        self.url, self.count = url, count
        self.sent = 0
        self.under_way = asyncio.Event()
        self.reply_seen = asyncio.Event()

    def _seen(self, url: str, wrap: Event) -> None:
        rumor = unwrap(wrap, ADMIN_KEY).rumor
        if rumor.pubkey == AGENT and rumor.kind == 14:
            self.reply_seen.set()

    async def run(self) -> None:
        async with RelayPool([self.url], **fast_client_kwargs()) as watcher, \
                RelayPool([self.url], **fast_client_kwargs()) as stranger:
            assert await watcher.wait_connected(5) and await stranger.wait_connected(5)
            watcher.subscribe([gift_wrap_filter(ADMIN, since=int(time.time()) - 3 * 86_400)], self._seen)
            while self.sent < self.count or not self.reply_seen.is_set():
                assert self.sent < 20 * self.count, "the agent's reply never reached the relay"
                batch = spam_wraps(ADMIN, 20, created_at=int(time.time()))
                outcomes = await asyncio.gather(*(stranger.publish(w, 30) for w in batch))
                assert all(o.any_accepted for o in outcomes)
                self.sent += len(batch)
                if self.sent >= self.count // 2:
                    self.under_way.set()


async def test_a_turn_with_the_served_agent_is_answered_during_a_flood_with_the_admin_key_in_a_signer(
        tmp_path: Path) -> None:
    # The served agent answers while a stranger floods the admin: 300 wraps before the message is sent, and more
    # until the reply is out and 600 at least. The admin's key is in a remote signer: each wrap costs the attached
    # window a round trip to it before its author is known, so wraps wait long to be judged.
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub, \
            ScriptedBunker([relay.url], ADMIN_KEY, secret="admin-once") as admin_signer:
        stub.script(Reply.text_reply("Served, through the flood."))
        cfg = _attached_config(relay.url, admin_bunker=admin_signer.bunker_uri(), reply_timeout_s=120.0,
                               report_wait_s=120.0)
        laptop = AppService(cfg, data_dir=tmp_path / "laptop", env={}, relay_client_options=fast_client_kwargs())
        seen: list[ServiceEvent] = []
        laptop.add_listener(seen.append)
        async with _served_agent(relay.url, stub.base_url, tmp_path / "server", time.time), laptop:
            flood = SteadyFlood(relay.url, 600)
            flooding = asyncio.create_task(flood.run())
            under_way = asyncio.create_task(flood.under_way.wait())
            await asyncio.wait([flooding, under_way], return_when=asyncio.FIRST_COMPLETED)
            under_way.cancel()
            events = [e async for e in laptop.chat.run_turn(laptop.chat.session_id, "still there?")]
            await flooding
            assert isinstance(events[-1], TurnFinished), events[-1]
            assert events[-1].reply == "Served, through the flood."
            [assembled] = [e.assembly for e in seen if isinstance(e, PromptAssembled)]
            assert assembled.layers  # the agent's prompt report came too
            await until(lambda: laptop.chat.link.strangers == flood.sent, 120, "every spam wrap judged")
