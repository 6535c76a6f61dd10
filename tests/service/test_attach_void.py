"""Never into the void: ``attach`` sends only to the relays the agent reads, found before anything is sent (its
address, its kind 10050 there). A message none of them takes ends its turn "not delivered" with the reason, waits on
disk, and goes — the same message, once — when a relay of the agent's takes it: given at the next start (``--relay``),
or back up while attached. Real relays (ours, the laptop's own shared one), the agent a service answering direct
messages with the LLM stub."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from dm_support import AGENT_ENV, dm_config, until, wraps_for
from llm_stub import LlmStub, Reply
from relay_servers import fast_client_kwargs, free_port

from didactyl_tui.agent.turn.events import TurnFailed, TurnFinished
from didactyl_tui.config import Config
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.nip19 import encode_nprofile
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import AttachedDelivered, AttachedMessage, ServiceEvent, ServiceWarning

pytestmark = pytest.mark.usefixtures("warm_litellm")
ADMIN_ENV = {"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec()}
AGENT = AGENT_KEY.public_key_hex


def _laptop(agent: str, data: Path, relays: list[str] = ()) -> tuple[AppService, list[ServiceEvent]]:
    """A laptop as a newcomer has it: its own embedded relay and nothing else configured."""
    cfg = Config()
    cfg.relays.embedded_port, cfg.relays.timeout_s = 0, 3.0
    cfg.memory.backend = "none"
    cfg.attach.agent, cfg.attach.relays, cfg.attach.send_timeout_s = agent, list(relays), 5.0
    cfg.attach.reply_timeout_s = 30.0
    svc = AppService(cfg, data_dir=data, env=ADMIN_ENV, relay_client_options=fast_client_kwargs())
    seen: list[ServiceEvent] = []
    svc.add_listener(seen.append)
    return svc, seen


def _agent(url: str, base_url: str, data: Path) -> AppService:
    return AppService(dm_config(base_url, urls=[url], admin=ADMIN_KEY.npub), data_dir=data, env=AGENT_ENV,
                      answer_dms=True, relay_client_options=fast_client_kwargs())


def _waiting(data: Path) -> list[str]:
    with sqlite3.connect(data / "attach-outbox.sqlite3") as db:
        return [row[0] for row in db.execute("SELECT rumor_id FROM waiting")]


async def test_an_npub_alone_is_not_delivered_to_our_own_relay_and_goes_once_when_the_agents_relay_is_given(
        tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        stub.script(Reply.text_reply("Here now."))
        async with _agent(relay.url, stub.base_url, tmp_path / "server"):
            laptop, seen = _laptop(AGENT_KEY.npub, tmp_path / "laptop")
            async with laptop:
                chat = laptop.chat
                warned = [e.message for e in seen if isinstance(e, ServiceWarning)]
                assert any("nothing can be sent to the agent: no relay of the agent's is known" in w for w in warned)
                assert laptop.attached_relays == []
                events = [e async for e in chat.run_turn(chat.session_id, "are you there?")]
                failed = events[-1]
                assert isinstance(failed, TurnFailed) and failed.title == "Not delivered" and failed.retryable
                assert "no relay of the agent's is known" in failed.message and failed.mark.startswith("not delivered")
                own = laptop.runtime.embedded_relay_url
                async with RelayPool([own], **fast_client_kwargs()) as mine:  # nothing went to the laptop's relay
                    assert await wraps_for(mine, AGENT) == []
                # Sent again (Retry): the same message waits, not a second one.
                [again] = [e async for e in chat.run_turn(chat.session_id, "are you there?")]
                assert isinstance(again, TurnFailed) and again.title == "Not delivered"
                assert len(_waiting(tmp_path / "laptop")) == 1
                assert await chat.session_messages(chat.session_id) == []  # only what reached the agent is in it
            assert stub.requests == []

            # The relay is given (`didactyl attach npub… --relay URL`): the waiting message goes at start, once.
            laptop, seen = _laptop(AGENT_KEY.npub, tmp_path / "laptop", [relay.url])
            async with laptop:
                assert laptop.attached_relays == [relay.url]
                await until(lambda: any(isinstance(e, AttachedMessage) and e.text == "Here now." for e in seen), 60,
                            "the agent's answer to the message delivered at start")
                texts = [m["content"] for m in await laptop.chat.session_messages(laptop.chat.session_id)]
                assert texts == ["are you there?", "Here now."]
                assert _waiting(tmp_path / "laptop") == []
            laptop, _ = _laptop(AGENT_KEY.npub, tmp_path / "laptop", [relay.url])
            async with laptop:  # a later start sends nothing again
                assert len(await laptop.chat.session_messages(laptop.chat.session_id)) == 2
        [request] = stub.requests
        assert "are you there?" in str(request.messages)


async def test_a_message_to_a_relay_that_is_down_waits_and_goes_once_the_relay_is_up(tmp_path: Path) -> None:
    port = free_port()
    address = encode_nprofile(AGENT, [f"ws://127.0.0.1:{port}"])  # what serve printed; its relay is down now
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("Back."))
        laptop, seen = _laptop(address, tmp_path / "laptop")
        async with laptop:
            chat = laptop.chat
            assert laptop.attached_relays == [f"ws://127.0.0.1:{port}"]
            [failed] = [e async for e in chat.run_turn(chat.session_id, "still up?")]
            assert isinstance(failed, TurnFailed) and failed.title == "Not delivered"
            assert f"ws://127.0.0.1:{port}" in failed.message
            async with EmbeddedRelay(tmp_path / "relay.sqlite3", port=port) as relay:
                delivered = await until(lambda: [e for e in seen if isinstance(e, AttachedDelivered)], 60,
                                        "the waiting message delivered once the relay is up")
                assert delivered[0].text == "still up?" and relay.url in delivered[0].detail
                # Retry pressed after it went by itself: not sent a second time.
                [late] = [e async for e in chat.run_turn(chat.session_id, "still up?")]
                assert isinstance(late, TurnFailed) and late.title == "Already delivered"
                async with _agent(relay.url, stub.base_url, tmp_path / "server"):
                    await until(lambda: any(isinstance(e, AttachedMessage) and e.text == "Back." for e in seen), 60,
                                "the agent's answer, shown")
            texts = [m["content"] for m in await chat.session_messages(chat.session_id)]
            assert texts.count("still up?") == 1 and "Back." in texts
        assert len(stub.requests) == 1


async def test_this_apps_own_relay_is_never_taken_for_the_agents(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        probe, _ = _laptop(AGENT_KEY.npub, tmp_path / "laptop", [relay.url])
        async with probe:
            own = probe.runtime.embedded_relay_url
        # On another machine, serve's loopback address is the laptop's own relay's (same port): not the agent's.
        laptop, seen = _laptop(encode_nprofile(AGENT, [own]), tmp_path / "laptop")
        async with laptop:
            assert laptop.runtime.embedded_relay_url == own and laptop.attached_relays == []
            [failed] = [e async for e in laptop.chat.run_turn(laptop.chat.session_id, "hello?")]
            assert isinstance(failed, TurnFailed) and "this app's own relay here" in failed.message
            async with RelayPool([own], **fast_client_kwargs()) as mine:
                assert await wraps_for(mine, AGENT) == []
            assert not any(isinstance(e, TurnFinished) for e in seen)


async def test_this_apps_own_relay_is_never_taken_for_the_agents_after_it_moves(tmp_path: Path) -> None:
    """The embedded relay may come back on another port while the app runs (stopped, then started again where the
    config asks): from then on that address is this app's own, whatever the agent's address names."""
    import socket

    from didactyl_tui.nostr.embedded_relay.shared import stop_shared_relay
    from didactyl_tui.nostr.results import ConnectionState

    with socket.socket() as blocker:  # the configured port, held by another program at start
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        there = f"ws://127.0.0.1:{port}"
        laptop, _ = _laptop(encode_nprofile(AGENT, [there]), tmp_path / "laptop")
        laptop.config.relays.embedded_port = port
        async with laptop:
            keeper = laptop.runtime.relay_keeper
            assert keeper is not None and keeper.relay.url != there  # started elsewhere: the port was taken
            assert laptop.attached_relays == [there]  # another machine's relay, for all this app knows
            blocker.close()
            first = keeper.relay
            assert await stop_shared_relay(first)
            await until(lambda: keeper.relay.url == there
                        and laptop.relays.states().get(there) is ConnectionState.CONNECTED, 30,
                        "the relay back on the configured port")
            assert laptop.runtime.embedded_relay_url == there
            assert laptop.attached_relays == []  # now this app's own: never the agent's
            [failed] = [e async for e in laptop.chat.run_turn(laptop.chat.session_id, "hello?")]
            assert isinstance(failed, TurnFailed) and "this app's own relay here" in failed.message
            async with RelayPool([there], **fast_client_kwargs()) as mine:
                assert await wraps_for(mine, AGENT) == []
