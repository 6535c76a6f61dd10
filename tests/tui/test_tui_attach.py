"""``didactyl attach`` in the terminal: the app (no model here) as a window onto an agent served elsewhere (a second
data dir's service answering direct messages, the LLM stub) over a real relay. A message typed is answered and shown,
the inspector holds the agent's prompt assembly, and the status bar names the agent instead of a model."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from dm_support import AGENT_ENV, dm_config
from llm_stub import LlmStub, Reply
from relay_servers import fast_client_kwargs, free_port
from tui_support import SIZE, LabelledApp, screen_text, started, wait_for

from didactyl_tui.config import Config
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.nip19 import encode_nprofile
from didactyl_tui.service.app import AppService
from didactyl_tui.tui.screens.first_run import FirstRunScreen
from didactyl_tui.tui.widgets.error_entry import ErrorEntry
from didactyl_tui.tui.widgets.message_entry import MessageEntry

pytestmark = pytest.mark.usefixtures("warm_litellm")


async def test_the_attached_app_sends_to_the_agent_and_shows_its_reply_and_assembly(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        stub.script(Reply.text_reply("Answered where I run."))
        agent = AppService(dm_config(stub.base_url, urls=[relay.url], admin=ADMIN_KEY.npub), data_dir=tmp_path / "srv",
                           env=AGENT_ENV, answer_dms=True, relay_client_options=fast_client_kwargs())
        config = Config()
        config.relays.embedded.enabled, config.relays.urls, config.relays.timeout_s = False, [relay.url], 3.0
        config.memory.backend = "none"
        config.attach.agent = AGENT_KEY.npub
        env = {"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec(), "HOME": "/home/user", "XDG_CONFIG_HOME": "/home/user/.config"}
        attached = AppService(config, data_dir=tmp_path / "laptop", env=env, relay_client_options=fast_client_kwargs())
        app = LabelledApp(config, data_dir=tmp_path / "laptop", env=env, service=attached)
        async with agent, app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            assert not isinstance(app.screen, FirstRunScreen)  # no model is needed here
            await wait_for(pilot, lambda: main.session_id == attached.attached_session, 30, "the agent's conversation")
            main.chat_input.focus()
            await pilot.press(*"hello, agent")
            await pilot.press("enter")
            await wait_for(pilot, lambda: main.conversation.last_reply() == "Answered where I run.", 60, "the reply")
            await wait_for(pilot, lambda: main.inspector.entries and main.inspector.entries[-1].reply, 30,
                           "the assembly with its reply")
            entry = main.inspector.entries[-1]
            assert entry.assembly.layers and entry.assembly.layers[0].section == "soul"
            assert entry.label.startswith("#1 agent's turn")
            text = screen_text(app)
            assert f"attached to {AGENT_KEY.npub[:20]}…" in text and "model " not in text
            assert "agent's relays 1/1" in text  # the agent's, not this app's own (its embedded relay is off here)
            assert ADMIN_KEY.nsec() not in text
            assert "hello, agent" in str(stub.requests[-1].messages)


async def test_a_message_the_agents_relay_does_not_take_is_marked_not_delivered_then_goes_once_it_is_up(
        tmp_path: Path) -> None:
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    config = Config()
    config.relays.embedded_port, config.relays.timeout_s = 0, 3.0  # the laptop's own relay: never the agent's
    config.memory.backend = "none"
    config.attach.agent, config.attach.send_timeout_s = encode_nprofile(AGENT_KEY.public_key_hex, [url]), 5.0
    env = {"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec(), "HOME": "/home/user", "XDG_CONFIG_HOME": "/home/user/.config"}
    attached = AppService(config, data_dir=tmp_path / "laptop", env=env, relay_client_options=fast_client_kwargs())
    app = LabelledApp(config, data_dir=tmp_path / "laptop", env=env, service=attached)
    async with LlmStub() as stub, app.run_test(size=SIZE) as pilot:
        stub.script(Reply.text_reply("Up again, and answered once."))
        await started(pilot)
        main = app.main_screen
        await wait_for(pilot, lambda: main.session_id == attached.attached_session, 30, "the agent's conversation")
        await wait_for(pilot, lambda: "agent's relays 0/1" in screen_text(app), 30, "the agent's relay, down")
        main.chat_input.focus()
        await pilot.press(*"hello?")
        await pilot.press("enter")

        def errors() -> list[ErrorEntry]:
            return list(main.conversation.query(ErrorEntry))

        [error] = await wait_for(pilot, errors, 60, "the turn marked not delivered")
        assert error.title == "Not delivered" and url in error.message and error.retry_text == "hello?"
        assert error.query("#retry")  # a Retry button
        [mine] = [m for m in main.conversation.query(MessageEntry) if m.role == "user"]
        assert "-failed" in mine.classes and str(mine.border_subtitle).startswith("not delivered")
        assert main.chat_input.text == "hello?"  # the words are kept, as for any failed turn
        main.chat_input.clear()

        async with EmbeddedRelay(tmp_path / "relay.sqlite3", port=port) as relay, \
                AppService(dm_config(stub.base_url, urls=[relay.url], admin=ADMIN_KEY.npub), data_dir=tmp_path / "srv",
                           env=AGENT_ENV, answer_dms=True, relay_client_options=fast_client_kwargs()):
            await wait_for(pilot, lambda: main.conversation.last_reply() == "Up again, and answered once.", 60,
                           "the agent's answer to the message delivered late")
            await wait_for(pilot, lambda: not errors(), 30, "the not-delivered mark and its Retry gone")
            assert str(mine.border_subtitle) == "delivered late" and "-failed" not in mine.classes
            await wait_for(pilot, lambda: "agent's relays 1/1" in screen_text(app), 30, "the agent's relay, up")
        assert len(stub.requests) == 1
