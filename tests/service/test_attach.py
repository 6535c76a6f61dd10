"""``didactyl attach``: a second data dir's service as a window onto an agent served elsewhere, over a real relay.

The agent side is a service answering direct messages (what ``serve`` runs) with the LLM stub; the attached side has
no model, only the admin's key and the agent's npub. A message sent from the attached chat is answered and shown with
its prompt assembly; a reply that comes late, or a message the admin sent from another client, joins the
conversation; with the agent's signer reachable (the scripted NIP-46 bunker holding the agent's key) a memory edit
made in the attached window is in the agent's next prompt."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from dm_support import AGENT_ENV, dm_config, until
from llm_stub import LlmStub, Reply, ToolCall
from nip46_bunker import ScriptedBunker
from relay_servers import fast_client_kwargs

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.turn.events import TextDelta, ToolCallFinished, TurnFailed, TurnFinished
from didactyl_tui.config import Config
from didactyl_tui.errors import AgentError, ConfigError
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip17 import make_message, wrap_message
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import (
    AttachedMessage,
    AttachedToolCalls,
    PromptAssembled,
    ServiceEvent,
    ServiceWarning,
)

pytestmark = pytest.mark.usefixtures("warm_litellm")
ADMIN_ENV = {"DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec()}


def _attached_config(url: str, **attach: object) -> Config:
    cfg = Config()
    cfg.relays.embedded.enabled, cfg.relays.urls, cfg.relays.timeout_s = False, [url], 3.0
    cfg.memory.backend = "none"
    cfg.attach.agent = AGENT_KEY.npub
    for key, value in attach.items():
        setattr(cfg.attach, key, value)
    return cfg


def _agent(url: str, base_url: str, data: Path) -> AppService:
    return AppService(dm_config(base_url, urls=[url], admin=ADMIN_KEY.npub), data_dir=data, env=AGENT_ENV,
                      answer_dms=True, relay_client_options=fast_client_kwargs())


def _attached(cfg: Config, data: Path, env: dict[str, str] | None = None) -> tuple[AppService, list[ServiceEvent]]:
    svc = AppService(cfg, data_dir=data, env=ADMIN_ENV if env is None else env,
                     relay_client_options=fast_client_kwargs())
    seen: list[ServiceEvent] = []
    svc.add_listener(seen.append)
    return svc, seen


async def test_a_message_from_the_attached_window_is_answered_with_its_prompt_assembly(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        stub.script(Reply.text_reply("Hello from the served agent."))
        attached, seen = _attached(_attached_config(relay.url), tmp_path / "laptop")
        async with _agent(relay.url, stub.base_url, tmp_path / "server"), attached:
            chat = attached.chat
            assert attached.attached_to == AGENT_KEY.public_key_hex and attached.model.configured is False
            assert any(isinstance(e, ServiceWarning) and "without the agent's key" in e.message for e in seen)
            session = await chat.new_session()
            assert session == chat.session_id  # one conversation: the admin's with the agent
            events = [e async for e in chat.run_turn(session, "what do you remember?")]
            assert isinstance(events[0], TextDelta) and events[0].text == "Hello from the served agent."
            assert isinstance(events[-1], TurnFinished) and events[-1].reply == "Hello from the served agent."
            # The model ran at the agent's side, once, and saw the admin's message.
            [request] = stub.requests
            assert "what do you remember?" in str(request.messages)
            [assembled] = [e.assembly for e in seen if isinstance(e, PromptAssembled)]
            assert [layer.section for layer in assembled.layers][:1] == ["soul"]
            assert assembled.extra["remote"]["agent"] == AGENT_KEY.public_key_hex
            assert (events[-1].usage.prompt_tokens, events[-1].usage.completion_tokens) == (11, 7)  # the agent's
            messages = await chat.session_messages(session)
            assert [(m["role"], m["content"]) for m in messages] == [
                ("user", "what do you remember?"), ("assistant", "Hello from the served agent.")]
            saved = await chat.sessions.assemblies(session)
            assert saved and saved[-1].reply == "Hello from the served agent."
            # Nothing here needs a model, and the prompt is not assembled here: the service offers neither.
            assert attached.prompt is None and attached.attached_relays == [relay.url]
            with pytest.raises(AgentError, match="no model runs here"):
                await attached.merges.model_draft(DocumentKey.SHORT_TERM, "<<<<<<< ours\na\n=======\nb\n>>>>>>>\n")

        # A second start finds the same conversation and adds nothing twice (the relays hold the same messages).
        again, _ = _attached(_attached_config(relay.url), tmp_path / "laptop")
        async with again:
            assert again.chat.session_id == session
            assert len(await again.chat.session_messages(session)) == 2


async def test_the_inspector_says_not_available_when_the_agent_sends_no_assembly(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        stub.script(Reply.text_reply("No report this time."))
        agent = _agent(relay.url, stub.base_url, tmp_path / "server")
        agent.config.dm.prompt_report = False
        attached, seen = _attached(_attached_config(relay.url, report_wait_s=0.5), tmp_path / "laptop")
        async with agent, attached:
            events = [e async for e in attached.chat.run_turn(attached.chat.session_id, "hi")]
            assert isinstance(events[-1], TurnFinished)
            [assembled] = [e.assembly for e in seen if isinstance(e, PromptAssembled)]
            assert assembled.layers == () and "no prompt assembly" in assembled.extra["remote"]["unavailable"]


async def test_the_agents_tool_calls_show_before_its_reply_and_stay_in_the_conversation(tmp_path: Path) -> None:
    save = json.dumps({"type": "short_term", "content": "The admin drinks green tea."})
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        stub.script(Reply.tools(ToolCall("memory_save", save, id="c1")), Reply.text_reply("Noted: green tea."))
        attached, _ = _attached(_attached_config(relay.url), tmp_path / "laptop")
        async with _agent(relay.url, stub.base_url, tmp_path / "server") as agent, attached:
            chat = attached.chat
            events = [e async for e in chat.run_turn(chat.session_id, "remember: green tea")]
            assert agent.documents.snapshot(DocumentKey.SHORT_TERM).content == "The admin drinks green tea."
            kept = await chat.session_messages(chat.session_id)
    kinds = [type(e).__name__ for e in events]
    assert kinds[:3] == ["ToolCallStarted", "ToolCallFinished", "TextDelta"] and kinds[-1] == "TurnFinished"
    done = events[1]
    assert isinstance(done, ToolCallFinished) and (done.name, done.is_error) == ("memory_save", False)
    assert done.arguments == {"type": "short_term", "content": "The admin drinks green tea."}
    assert "accepted" in done.result  # the agent's relays took the save: its outcome, as the agent saw it
    assert events[-1].tool_calls == [done]
    # Kept as a turn of this app's own is kept: the call, its result, then the reply (a resumed chat shows them).
    assert [m["role"] for m in kept] == ["user", "assistant", "tool", "assistant"]
    assert kept[1]["tool_calls"][0]["function"]["name"] == "memory_save" and kept[2]["content"] == done.result
    assert kept[3]["content"] == "Noted: green tea."


async def test_a_late_reply_and_a_message_from_another_client_join_the_conversation(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        attached, seen = _attached(_attached_config(relay.url, reply_timeout_s=0.5, relays=[relay.url]),
                                   tmp_path / "laptop")
        async with attached:
            chat = attached.chat
            # No agent runs yet (nor has it said where it reads: its relay is given): the message reaches that relay,
            # the reply does not come in time.
            events = [e async for e in chat.run_turn(chat.session_id, "are you up?")]
            assert isinstance(events[-1], TurnFailed) and "has not answered" in events[-1].message
            # The admin writes from another device with the same key (the message to the agent, and its own copy).
            rumor = make_message(ADMIN_KEY.public_key_hex, [AGENT_KEY.public_key_hex], "from my phone",
                                 created_at=int(time.time()))
            async with RelayPool([relay.url], **fast_client_kwargs()) as client:
                for wrap in wrap_message(rumor, ADMIN_KEY, now=int(time.time())).values():
                    assert (await client.publish(wrap, timeout=3)).any_accepted
            stub.script(Reply.tools(ToolCall("my_npub", "{}")), Reply.text_reply("Up now."),
                        Reply.text_reply("Phone message read."))
            async with _agent(relay.url, stub.base_url, tmp_path / "server"):
                def shown() -> list[tuple[str, str]]:
                    return [(e.role, e.text) for e in seen if isinstance(e, AttachedMessage)]

                await until(lambda: len(shown()) >= 3, 60, "the late reply and the phone's message")
            assert ("user", "from my phone") in shown()
            assert {text for role, text in shown() if role == "assistant"} == {"Up now.", "Phone message read."}
            texts = [m["content"] for m in await chat.session_messages(chat.session_id)]
            assert texts[0] == "are you up?" and texts.count("Up now.") == 1
            # Each reply that came with no turn waiting brings its prompt to the inspector, and to the saved chat.
            await until(lambda: len([e for e in seen if isinstance(e, PromptAssembled)]) >= 2, 30, "their prompts")
            prompts = [e.assembly for e in seen if isinstance(e, PromptAssembled)]
            assert len({a.extra["remote"]["reply_id"] for a in prompts}) == 2  # the agent's reports, one a reply
            assert all(a.layers for a in prompts)  # each the agent's own assembly, not "not available"
            saved = {s.reply for s in await chat.sessions.assemblies(chat.session_id)}
            assert {"Up now.", "Phone message read."} <= saved
            # The first answer's tool call came in its report: kept with the chat, after the reply.
            kept = await chat.session_messages(chat.session_id)
            calls = [m for m in kept if m["role"] == "assistant" and m.get("tool_calls")]
            assert [c["tool_calls"][0]["function"]["name"] for c in calls] == ["my_npub"]
            assert any(m["role"] == "tool" and AGENT_KEY.npub in m["content"] for m in kept)
            # and told to the view as they are kept, so the open chat shows them now, not only when opened again
            told = [e for e in seen if isinstance(e, AttachedToolCalls)]
            assert [(e.session_id, [(c.name, c.ending) for c in e.calls]) for e in told] == [
                (chat.session_id, [("my_npub", "done")])]
            assert AGENT_KEY.npub in told[0].calls[0].result


async def test_a_memory_edit_in_the_attached_window_is_in_the_agents_next_prompt(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub, \
            ScriptedBunker([relay.url], AGENT_KEY, secret="once") as bunker:
        cfg = _attached_config(relay.url)
        cfg.signer.bunker, cfg.signer.request_timeout_s = bunker.bunker_uri(), 10.0
        attached, seen = _attached(cfg, tmp_path / "laptop")
        stub.script(Reply.text_reply("I see the note."))
        async with _agent(relay.url, stub.base_url, tmp_path / "server") as agent, attached:
            assert not any(isinstance(e, ServiceWarning) and "without the agent's key" in e.message for e in seen)
            await attached.documents.save(DocumentKey.SHORT_TERM, "The admin's cat is called Miso.")
            await until(lambda: agent.documents.snapshot(DocumentKey.SHORT_TERM).content
                        == "The admin's cat is called Miso.", 30, "the edit at the agent's side")
            events = [e async for e in attached.chat.run_turn(attached.chat.session_id, "what is my cat called?")]
            assert isinstance(events[-1], TurnFinished) and events[-1].reply == "I see the note."
            assert "Miso" in str(stub.requests[-1].messages)


async def test_attach_refuses_a_bad_agent_key_and_a_bunker_for_another_key(tmp_path: Path) -> None:
    cfg = _attached_config("ws://127.0.0.1:9")
    cfg.attach.agent = "npub1notakey"
    with pytest.raises(ConfigError, match="agent"):
        AppService(cfg, data_dir=tmp_path / "a", env=ADMIN_ENV)
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, \
            ScriptedBunker([relay.url], SecretKey.generate(), secret="once") as other:
        cfg = _attached_config(relay.url)
        cfg.signer.bunker, cfg.signer.request_timeout_s = other.bunker_uri(), 10.0
        svc, _ = _attached(cfg, tmp_path / "b")
        with pytest.raises(ConfigError, match="not the agent attached to"):
            await svc.start()


async def test_a_first_attach_makes_an_admin_key_and_says_its_npub(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        svc, seen = _attached(_attached_config(relay.url), tmp_path / "laptop", env={})
        async with svc:
            key_file = tmp_path / "laptop" / "admin.key"
            assert key_file.stat().st_mode & 0o777 == 0o600
            [notice] = [e.message for e in seen if isinstance(e, ServiceWarning) and "admin key" in e.message]
            npub = SecretKey.parse(key_file.read_text().strip()).npub
            assert npub in notice and "nsec" not in notice
            assert svc.admin_pubkey == SecretKey.parse(key_file.read_text().strip()).public_key_hex


async def test_the_admin_key_in_a_remote_signer_talks_to_the_agent(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub, \
            ScriptedBunker([relay.url], ADMIN_KEY, secret="admin-once") as admin_signer:
        stub.script(Reply.text_reply("Hello, admin behind a signer."))
        attached, _ = _attached(_attached_config(relay.url, admin_bunker=admin_signer.bunker_uri()),
                                tmp_path / "laptop", env={})
        async with _agent(relay.url, stub.base_url, tmp_path / "server"), attached:
            assert attached.admin_pubkey == ADMIN_KEY.public_key_hex
            assert not (tmp_path / "laptop" / "admin.key").exists()  # no admin key on this machine
            session = (tmp_path / "laptop" / "admin-signer.json")
            assert session.stat().st_mode & 0o777 == 0o600
            events = [e async for e in attached.chat.run_turn(attached.chat.session_id, "ping")]
            assert isinstance(events[-1], TurnFinished) and events[-1].reply == "Hello, admin behind a signer."
