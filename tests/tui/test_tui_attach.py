"""``didactyl attach`` in the terminal: the app (no model here) as a window onto an agent served elsewhere (a second
data dir's service answering direct messages, the LLM stub) over a real relay. A message typed is answered and shown,
the inspector holds the agent's prompt assembly, and the status bar names the agent instead of a model."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from dm_support import AGENT_ENV, dm_config, until
from llm_stub import LlmStub, Reply, ToolCall
from relay_servers import fast_client_kwargs, free_port
from textual.widgets import Static
from tui_support import SIZE, LabelledApp, screen_text, started, wait_for

from didactyl_tui.config import Config
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.kinds import METADATA
from didactyl_tui.nostr.nip17 import make_message, wrap_message
from didactyl_tui.nostr.nip19 import encode_nprofile
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.documents import KEY_ELSEWHERE
from didactyl_tui.service.events import AttachedMessage
from didactyl_tui.service.sessions import TAIL_MESSAGES, Sessions, StoredTail, open_sessions
from didactyl_tui.tui.screens.first_run import FirstRunScreen
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.widgets.error_entry import ErrorEntry
from didactyl_tui.tui.widgets.memory_pane import MemoryPane
from didactyl_tui.tui.widgets.message_entry import MessageEntry
from didactyl_tui.tui.widgets.tool_call_entry import ToolCallEntry

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
            await wait_for(pilot, lambda: main.chat.session_id == attached.attached_session, 30,
                           "the agent's conversation")
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
            # A dry run asks for the prompt here: the window says where it is assembled, and adds no entry.
            entries, asked = len(main.inspector.entries), len(stub.requests)
            main.action_dry_run()
            await wait_for(pilot, lambda: any("assembled where the agent runs" in str(n.message)
                                              for n in app._notifications), 10, "where the prompt is assembled")
            assert len(main.inspector.entries) == entries and len(stub.requests) == asked


def pane_text(widget: Static) -> str:
    return str(widget.content)


async def test_the_attached_panes_tell_the_truth_and_the_agents_tool_calls_show(tmp_path: Path) -> None:
    save = json.dumps({"type": "short_term", "content": "The admin drinks green tea."})
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        stub.script(Reply.tools(ToolCall("memory_save", save, id="c1")), Reply.text_reply("Noted: green tea."))
        # The agent's kind 0 on its relay, as its serve published it. (Put there by the test: a serve publishes its
        # profile only once its own read of the relays answered within [relays] timeout_s, which a loaded machine
        # may not give it; what is tested here is the attached window reading the kind 0 from the relays.)
        profile = sign_event(AGENT_KEY, kind=METADATA, content=json.dumps({"name": "Served Agent"}),
                             created_at=int(time.time()), tags=[])
        async with RelayPool([relay.url], **fast_client_kwargs()) as client:
            assert (await client.publish(profile, timeout=10)).any_accepted
        served = dm_config(stub.base_url, urls=[relay.url], admin=ADMIN_KEY.npub)
        served.agent.publish_profile, served.agent.name = True, "Served Agent"  # the same: nothing to publish again
        agent = AppService(served, data_dir=tmp_path / "srv", env=AGENT_ENV, answer_dms=True,
                           relay_client_options=fast_client_kwargs())
        config = Config()
        config.relays.embedded.enabled, config.relays.urls, config.relays.timeout_s = False, [relay.url], 3.0
        config.memory.backend, config.attach.agent = "none", AGENT_KEY.npub
        env = {"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec(), "HOME": "/home/user", "XDG_CONFIG_HOME": "/home/user/.config"}
        attached = AppService(config, data_dir=tmp_path / "laptop", env=env, relay_client_options=fast_client_kwargs())
        app = LabelledApp(config, data_dir=tmp_path / "laptop", env=env, service=attached)
        async with agent, app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            # At once, the reason: not "(loading…)", not "no relay answered".
            for pane in (main.query_one("#short-term", MemoryPane), main.query_one("#long-term", MemoryPane)):
                assert KEY_ELSEWHERE in pane_text(pane.query_one(".memory-content", Static))
                assert pane.border_subtitle == "not available here"
            assert KEY_ELSEWHERE in pane_text(main.query_one("#task-lines", Static))
            await pilot.press("f6")
            await wait_for(pilot, lambda: any(f"Short-term memory: {KEY_ELSEWHERE}" in str(n.message)
                                              for n in app._notifications), 10, "the reason F6 gives")
            assert not any("no relay answered" in str(n.message) for n in app._notifications)
            assert not isinstance(app.screen, MemoryEditorScreen)

            await pilot.press("f3")  # the self pane: the agent's name, from its kind 0 on the relay
            await wait_for(pilot, lambda: main.self_panes() and "Served Agent" in pane_text(
                main.self_panes()[0].query_one("#agent-identity", Static)), 30, "the agent's profile")

            await wait_for(pilot, lambda: main.chat.session_id == attached.attached_session, 30, "the conversation")
            main.chat_input.focus()
            await pilot.press(*"remember: green tea")
            await pilot.press("enter")
            await wait_for(pilot, lambda: main.conversation.last_reply() == "Noted: green tea.", 60, "the reply")
            entries = [w for w in main.conversation.children if isinstance(w, ToolCallEntry | MessageEntry)]
            [call] = [w for w in entries if isinstance(w, ToolCallEntry)]
            assert call.tool_name == "memory_save" and call.result is not None and call.ending == "done"
            assert call.arguments["content"] == "The admin drinks green tea."
            assert entries.index(call) == len(entries) - 2  # above the reply, as in local mode


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
        stub.script(Reply.tools(ToolCall("my_npub", "{}")), Reply.text_reply("Up again, and answered once."))
        await started(pilot)
        main = app.main_screen
        await wait_for(pilot, lambda: main.chat.session_id == attached.attached_session, 30, "the agent's conversation")
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
            # The late reply's tool call, told by the agent's report after it, shows now (after the reply, where a
            # resumed chat shows it), not only when the chat is opened again.
            [call] = await wait_for(pilot, lambda: list(main.conversation.query(ToolCallEntry)), 60,
                                    "the late reply's tool call")
            assert (call.tool_name, call.ending) == ("my_npub", "done")
            shown = [child for child in main.conversation.children if isinstance(child, (MessageEntry, ToolCallEntry))]
            assert shown.index(call) == len(shown) - 1 and isinstance(shown[-2], MessageEntry)
        assert len(stub.requests) == 2


async def test_messages_that_come_while_the_chat_is_read_and_shown_show_once_each_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's conversation is read from the store and put on screen while its messages keep coming (the answer to
    a message delivered at start, the admin on another device): one saved before the read is shown by the read, one
    saved after it is added after the read's messages; never lost (the read's screen replacing it) nor shown twice."""
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        config = Config()
        config.relays.embedded.enabled, config.relays.urls, config.relays.timeout_s = False, [relay.url], 3.0
        config.memory.backend, config.attach.agent = "none", AGENT_KEY.npub
        env = {"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec(), "HOME": "/home/user", "XDG_CONFIG_HOME": "/home/user/.config"}
        attached = AppService(config, data_dir=tmp_path / "laptop", env=env, relay_client_options=fast_client_kwargs())
        told_texts: list[str] = []
        attached.add_listener(lambda e: told_texts.append(e.text) if isinstance(e, AttachedMessage) else None)

        async def from_phone(text: str, *, told: bool = True) -> None:  # the admin, on another device: same key
            rumor = make_message(ADMIN_KEY.public_key_hex, [AGENT_KEY.public_key_hex], text,
                                 created_at=int(time.time()))
            async with RelayPool([relay.url], **fast_client_kwargs()) as client:
                for wrap in wrap_message(rumor, ADMIN_KEY, now=int(time.time())).values():
                    assert (await client.publish(wrap, timeout=10)).any_accepted
            if told:
                await until(lambda: text in told_texts, 30, f"{text!r} saved and told to the view")

        await from_phone("before the start", told=False)  # no window is open: read from the relay at start
        read_tail = Sessions.tail

        async def tail_while_messages_come(self: Sessions, session_id: str, limit: int = TAIL_MESSAGES) -> StoredTail:
            if session_id != attached.attached_session:
                return await read_tail(self, session_id, limit)
            await from_phone("saved before the read")
            tail = await read_tail(self, session_id, limit)
            await from_phone("saved after the read")  # told to the view before the read is on screen
            return tail

        monkeypatch.setattr(Sessions, "tail", tail_while_messages_come)
        app = LabelledApp(config, data_dir=tmp_path / "laptop", env=env, service=attached)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            expected = ["before the start", "saved before the read", "saved after the read"]

            def users() -> list[str]:
                return [m.text for m in main.conversation.query(MessageEntry) if m.role == "user"]

            await wait_for(pilot, lambda: "saved after the read" in users(), 30, "the message saved after the read")
            await from_phone("after the chat is on screen")
            await wait_for(pilot, lambda: "after the chat is on screen" in users(), 30, "a message after that")
            assert users() == [*expected, "after the chat is on screen"]


async def test_continue_of_the_agents_conversation_shows_what_start_read_from_the_relays(tmp_path: Path) -> None:
    """`didactyl --continue` with `[attach] agent` shows the conversation read before the first frame; the messages
    that starting then reads from the relays (written while the app was closed) join it, as a plain start shows them."""
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        config = Config()
        config.relays.embedded.enabled, config.relays.urls, config.relays.timeout_s = False, [relay.url], 3.0
        config.memory.backend, config.attach.agent = "none", AGENT_KEY.npub
        env = {"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec(), "HOME": "/home/user", "XDG_CONFIG_HOME": "/home/user/.config"}
        laptop = tmp_path / "laptop"

        async def from_phone(text: str) -> None:  # the admin, on another device: same key
            rumor = make_message(ADMIN_KEY.public_key_hex, [AGENT_KEY.public_key_hex], text,
                                 created_at=int(time.time()))
            async with RelayPool([relay.url], **fast_client_kwargs()) as client:
                for wrap in wrap_message(rumor, ADMIN_KEY, now=int(time.time())).values():
                    assert (await client.publish(wrap, timeout=10)).any_accepted

        await from_phone("an earlier day")
        async with AppService(config, data_dir=laptop, env=env, relay_client_options=fast_client_kwargs()) as first:
            session = first.attached_session
            assert session is not None and "an earlier day" in str(await first.chat.session_messages(session))
        await from_phone("while the app was closed")
        sessions = open_sessions(laptop)  # what `--continue` reads before the first frame
        try:
            opened = await sessions.tail(session)
        finally:
            sessions.store.close()
        assert [m["content"] for m in opened.messages] == ["an earlier day"]
        attached = AppService(config, data_dir=laptop, env=env, relay_client_options=fast_client_kwargs())
        app = LabelledApp(config, data_dir=laptop, env=env, service=attached, opened=opened)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen

            def users() -> list[str]:
                return [m.text for m in main.conversation.query(MessageEntry) if m.role == "user"]

            await wait_for(pilot, lambda: "while the app was closed" in users(), 30, "the message read at start")
            assert users() == ["an earlier day", "while the app was closed"] and main.chat.session_id == session


async def test_a_message_sent_while_the_agents_conversation_opens_at_start_joins_it_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A message sent as the app starts (typed before the agent was ready, sent the moment it is) while the agent's
    conversation is read and put on screen: the conversation still opens, and the message joins it after its end."""
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        config = Config()
        config.relays.embedded.enabled, config.relays.urls, config.relays.timeout_s = False, [relay.url], 3.0
        config.memory.backend, config.attach.agent = "none", AGENT_KEY.npub
        env = {"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec(), "HOME": "/home/user", "XDG_CONFIG_HOME": "/home/user/.config"}
        rumor = make_message(ADMIN_KEY.public_key_hex, [AGENT_KEY.public_key_hex], "from an earlier day",
                             created_at=int(time.time()))
        async with RelayPool([relay.url], **fast_client_kwargs()) as client:  # the admin, on another device
            for wrap in wrap_message(rumor, ADMIN_KEY, now=int(time.time())).values():
                assert (await client.publish(wrap, timeout=10)).any_accepted
        attached = AppService(config, data_dir=tmp_path / "laptop", env=env, relay_client_options=fast_client_kwargs())
        app = LabelledApp(config, data_dir=tmp_path / "laptop", env=env, service=attached)
        read_tail = Sessions.tail

        async def tail_while_a_message_is_sent(self: Sessions, session_id: str,
                                               limit: int = TAIL_MESSAGES) -> StoredTail:
            tail = await read_tail(self, session_id, limit)
            if session_id == attached.attached_session:
                app.main_screen.chat.send("sent at start")  # its turn starts now, while this read is not on screen
                for _ in range(10):
                    await asyncio.sleep(0.01)
            return tail

        monkeypatch.setattr(Sessions, "tail", tail_while_a_message_is_sent)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen

            def users() -> list[str]:
                return [m.text for m in main.conversation.query(MessageEntry) if m.role == "user"]

            [error] = await wait_for(pilot, lambda: list(main.conversation.query(ErrorEntry)), 60,
                                     "the message marked not delivered (the agent's relays are not known)")
            assert error.retry_text == "sent at start"
            assert users() == ["from an earlier day", "sent at start"]
