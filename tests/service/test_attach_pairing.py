"""Pairing and refusals as the attached window meets them, on a relay that takes gift wraps only for the keys it knows
(as the agent's embedded relay does): a key the agent does not answer is told, from its own copy's refusal, that the
agent's relays take nothing for it; an invitation the agent refuses there cannot send its answer back, and the window
says so instead of waiting in silence. The agent: a service answering direct messages (its config a file it writes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, OTHER_KEY
from dm_support import AGENT_ENV, until
from llm_stub import LlmStub
from relay_servers import fast_client_kwargs

from didactyl_tui.agent.dm.invitation import issue, redeem
from didactyl_tui.agent.turn.events import TurnFailed
from didactyl_tui.config import Config
from didactyl_tui.config_file import load_config
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.nip19 import encode_nprofile
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import ServiceEvent, ServiceWarning

pytestmark = pytest.mark.usefixtures("warm_litellm")
AGENT = AGENT_KEY.public_key_hex


def _agent(tmp_path: Path, url: str, base_url: str) -> AppService:
    path = tmp_path / "config.toml"
    path.write_text(f'[llm]\nmodel = "openai/stub-model"\napi_base = "{base_url}"\napi_key_env = "STUB_KEY"\n'
                    f'[relays]\nembedded = false\nurls = ["{url}"]\ntimeout_s = 3.0\n[memory]\nbackend = "none"\n'
                    "[agent]\npublish_profile = false\n", "utf-8")
    return AppService(load_config(path, AGENT_ENV), data_dir=tmp_path / "agent", env=AGENT_ENV, answer_dms=True,
                      relay_client_options=fast_client_kwargs())


def _laptop(url: str, data: Path, invitation: str = "") -> tuple[AppService, list[ServiceEvent]]:
    cfg = Config()
    cfg.relays.embedded.enabled, cfg.relays.urls, cfg.relays.timeout_s = False, [url], 3.0
    cfg.memory.backend = "none"
    cfg.attach.agent, cfg.attach.send_timeout_s, cfg.attach.reply_timeout_s = encode_nprofile(AGENT, [url]), 2.0, 2.0
    cfg.invitation = invitation
    svc = AppService(cfg, data_dir=data, env={"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec()},
                     relay_client_options=fast_client_kwargs())
    seen: list[ServiceEvent] = []
    svc.add_listener(seen.append)
    return svc, seen


def _allow_listed(tmp_path: Path) -> EmbeddedRelay:
    """The agent's relay while nobody is paired: only the agent writes, gift wraps only for the agent."""
    return EmbeddedRelay(tmp_path / "relay.sqlite3", allowed_writers=[AGENT], gift_wrap_recipients=[AGENT])


def _lasting(seen: list[ServiceEvent], text: str) -> list[str]:
    return [e.message for e in seen if isinstance(e, ServiceWarning) and e.lasting and text in e.message]


async def test_a_key_the_agent_does_not_answer_is_told_its_relays_take_nothing_for_it(tmp_path: Path) -> None:
    async with _allow_listed(tmp_path) as relay, LlmStub() as stub, _agent(tmp_path, relay.url, stub.base_url):
        laptop, seen = _laptop(relay.url, tmp_path / "laptop")
        async with laptop:
            events = [e async for e in laptop.chat.run_turn(laptop.chat.session_id, "hello?")]
            assert isinstance(events[-1], TurnFailed) and events[-1].title == "No reply yet"  # delivered, unanswered
            [told] = _lasting(seen, "the agent's relays take no messages for your key")
            assert "blocked:" in told and ADMIN_KEY.npub in told and "--invite" in told
        assert stub.requests == []


async def test_an_invitation_refused_where_its_answer_cannot_come_back_is_said_not_waited_on(tmp_path: Path) -> None:
    async with _allow_listed(tmp_path) as relay, LlmStub() as stub:
        agent = _agent(tmp_path, relay.url, stub.base_url)
        secret, _ = issue(tmp_path / "agent", ttl_s=600, admin_then=None, now=int(time.time()))
        assert redeem(tmp_path / "agent", secret, sender=OTHER_KEY.public_key_hex, admin_now=None,
                      now=int(time.time())).ok  # someone was first
        async with agent:
            laptop, seen = _laptop(relay.url, tmp_path / "laptop", secret)
            async with laptop:
                told = await until(lambda: _lasting(seen, "has not answered the invitation"), 60, "the window's word")
                assert "cannot reach you" in told[0] and "didactyl invite" in told[0]
            assert agent.policy.rights.dm.admin is None
