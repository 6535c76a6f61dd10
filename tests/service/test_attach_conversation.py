"""A conversation with an agent elsewhere is that agent's (#31): after a real ``attach`` (a served agent answering
over a relay, the LLM stub), ``didactyl --continue`` and ``--session`` open it attached to that agent, and this data
dir's own agent, started locally with a model, never answers in it (the model is not asked, nothing is added)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from cli_support import cli_env
from dm_support import AGENT_ENV, dm_config
from llm_stub import LlmStub, Reply
from relay_servers import fast_client_kwargs
from tui_support import TEST_KEY

from didactyl_tui.agent.turn.events import TurnFailed, TurnFinished
from didactyl_tui.cli import run
from didactyl_tui.config import Config
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.service.app import AppService
from didactyl_tui.service.sessions import StoredTail

pytestmark = pytest.mark.usefixtures("warm_litellm")


def open_app(argv: list[str], env: dict[str, str]) -> tuple[int, list[tuple[str, str | None]], str]:
    """``didactyl`` with ``argv``, the app replaced by a record of how it would open: ([attach] agent, session)."""
    opened: list[tuple[str, str | None]] = []

    def launch(config: Config, data: Path, env: Any, tail: StoredTail | None) -> None:
        opened.append((config.attach.agent, tail.session_id if tail is not None else None))

    err = io.StringIO()
    code = run(argv, env=env, launch_tui=launch, stdout=io.StringIO(), stderr=err)
    return code, opened, err.getvalue()


async def test_continue_after_an_attach_opens_it_attached_and_the_local_agent_never_answers_in_it(
        tmp_path: Path) -> None:
    laptop = tmp_path / "laptop"
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        stub.script(Reply.text_reply("Answered where I run."), Reply.text_reply("The local agent speaking."))
        agent = AppService(dm_config(stub.base_url, urls=[relay.url], admin=ADMIN_KEY.npub), data_dir=tmp_path / "srv",
                           env=AGENT_ENV, answer_dms=True, relay_client_options=fast_client_kwargs())
        window = Config()
        window.relays.embedded.enabled, window.relays.urls, window.relays.timeout_s = False, [relay.url], 3.0
        window.memory.backend, window.attach.agent = "none", AGENT_KEY.npub
        attached = AppService(window, data_dir=laptop, env={"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec()},
                              relay_client_options=fast_client_kwargs())
        async with agent, attached:
            conversation = await attached.chat.new_session()
            events = [e async for e in attached.chat.run_turn(conversation, "hello, agent")]
            assert isinstance(events[-1], TurnFinished) and events[-1].reply == "Answered where I run."
            held = await attached.chat.session_messages(conversation)

        # The laptop later opens didactyl with no attach configured: the newest conversation is the attached one.
        env = cli_env(tmp_path, f'[relays]\nembedded = false\nurls = ["{relay.url}"]\n[memory]\nbackend = "none"\n',
                      DIDACTYL_DATA_DIR=str(laptop))
        # (in a thread: a command runs its own event loop)
        assert await asyncio.to_thread(open_app, ["--continue"], env) == (0, [(AGENT_KEY.npub, conversation)], "")
        assert await asyncio.to_thread(open_app, ["--session", conversation[:8]], env) == (
            0, [(AGENT_KEY.npub, conversation)], "")
        listed = io.StringIO()
        assert await asyncio.to_thread(run, ["sessions", "list"], env=env, stdout=listed, stderr=io.StringIO()) == 0
        assert f"{AGENT_KEY.npub[:12]}…{AGENT_KEY.npub[-6:]}" in listed.getvalue()

        # This data dir's own agent, started here with a model, is asked to answer in that conversation: it refuses.
        local = dm_config(stub.base_url, urls=[relay.url])
        asked_before = len(stub.requests)
        async with AppService(local, data_dir=laptop, env={"DIDACTYL_NSEC": TEST_KEY.nsec(), "STUB_KEY": "sk-stub"},
                              relay_client_options=fast_client_kwargs()) as here:
            refused = [e async for e in here.chat.run_turn(conversation, "answer here, local agent")]
            assert await here.chat.session_messages(conversation) == held  # nothing added, not even the message
            mine = await here.chat.new_session()  # a conversation of its own is answered as ever
            answered = [e async for e in here.chat.run_turn(mine, "and you?")]
    [failed] = refused
    assert isinstance(failed, TurnFailed) and not failed.retryable
    assert f"with the agent {AGENT_KEY.npub[:20]}…, which runs elsewhere: open it attached" in failed.message
    assert len(stub.requests) == asked_before + 1 and "answer here" not in str(stub.requests[-1].messages)
    assert isinstance(answered[-1], TurnFinished) and answered[-1].reply == "The local agent speaking."


def test_with_attach_configured_only_that_agents_conversation_opens(tmp_path: Path) -> None:
    from didactyl_tui.agent.conversations.store import ConversationStore

    data = tmp_path / "data"
    data.mkdir()
    store = ConversationStore(data / "conversations.sqlite3")
    local = store.new_session("mine")
    store.append(local, [{"role": "user", "content": "hi"}])
    store.close()
    env = cli_env(tmp_path, f'[attach]\nagent = "{AGENT_KEY.npub}"\n', DIDACTYL_DATA_DIR=str(data))
    code, opened, err = open_app(["--session", local], env)
    assert (code, opened) == (2, [])
    assert "this conversation is with this data dir's own agent, not the one attached to" in err
    code, opened, err = open_app(["--continue"], env)
    assert (code, opened) == (2, []) and f"no saved conversation with the agent {AGENT_KEY.npub[:20]}…" in err
