"""AppService end to end: embedded relay on loopback, the memory path, self-context, prompts, a chat turn
through real litellm against the HTTP stub server."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, OTHER_KEY, memory_event, profile_event, wait_for
from llm_stub import LlmStub, Reply, ToolCall
from relay_servers import fast_client_kwargs

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.turn.events import TextDelta, ToolCallFinished, TurnFailed, TurnFinished, TurnStarted
from didactyl_tui.config import Config
from didactyl_tui.errors import AgentError, ConfigError
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import DocumentChanged, PromptAssembled, SelfContextChanged, ServiceWarning
from didactyl_tui.service.model import ModelSettings
from didactyl_tui.service.state import read_state

pytestmark = pytest.mark.usefixtures("warm_litellm")  # a turn here must not pay litellm's import

ST, LT = DocumentKey.SHORT_TERM, DocumentKey.LONG_TERM


def make_config(**relays: Any) -> Config:
    cfg = Config()
    cfg.relays.embedded_port = 0
    cfg.relays.timeout_s = 2.0
    for k, v in relays.items():
        setattr(cfg.relays, k, v)
    return cfg


def env_for(**extra: str) -> dict[str, str]:
    return {"DIDACTYL_NSEC": AGENT_KEY.nsec(), **extra}


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[AppService]:
    svc = AppService(make_config(), data_dir=tmp_path / "data", env=env_for(),
                     relay_client_options=fast_client_kwargs())
    await svc.start()
    yield svc
    await svc.stop()


async def reader_for(url: str) -> RelayPool:
    pool = RelayPool([url], **fast_client_kwargs())
    await pool.start()
    return pool


def section(assembly, name: str):
    return next(layer for layer in assembly.layers if layer.section == name)


async def test_start_publishes_the_configured_identity_once(tmp_path: Path) -> None:
    cfg = make_config()
    cfg.agent.name = "Bo"
    cfg.agent.contacts = [ADMIN_KEY.npub]
    cfg.admin.pubkey = ADMIN_KEY.public_key_hex
    data = tmp_path / "data"
    async with AppService(cfg, data_dir=data, env=env_for(), relay_client_options=fast_client_kwargs()) as svc:
        assert svc.identity.agent_npub == AGENT_KEY.npub and svc.admin_pubkey == ADMIN_KEY.public_key_hex
        url = svc.relays.embedded_url
        assert svc.relays.states() == {url: svc.relays.states()[url]} and svc.relays.states()[url].value == "connected"
        view = svc.identity.snapshot().agent
        assert view.profile["name"] == "Bo" and view.contacts == [ADMIN_KEY.public_key_hex]
        first_profile_id = view.profile_event.id
    # Read back by a separate client from the same relay database.
    async with AppService(cfg, data_dir=data, env=env_for(), relay_client_options=fast_client_kwargs(),
                          ) as again:
        reader = await reader_for(again.relays.embedded_url)
        try:
            events = await reader.query([{"authors": [AGENT_KEY.public_key_hex], "kinds": [0, 3]}], timeout=2)
        finally:
            await reader.close()
        by_kind = {ev.kind: ev for ev in events}
        assert json.loads(by_kind[0].content)["name"] == "Bo"
        assert by_kind[3].tag_values("p") == [ADMIN_KEY.public_key_hex]
        # Unchanged config: nothing new was published on the second start.
        assert by_kind[0].id == first_profile_id
        assert again.identity.snapshot().agent.profile_event.id == first_profile_id


async def test_saved_short_term_memory_is_in_the_next_prompt(service: AppService) -> None:
    seen: list[Any] = []
    service.add_listener(seen.append)
    session = await service.chat.new_session()
    before = await service.prompt.dry_run(session, "hi")
    assert section(before, "short_term_memory").skipped

    result = await service.documents.save(ST, "Admin is called Ada.")
    assert result.outcome.accepted_by == [service.relays.embedded_url]
    after = await service.prompt.dry_run(session, "hi")
    stm = section(after, "short_term_memory")
    assert stm.content == "## Short-Term Memory\n\nAdmin is called Ada.\n\n(20/8,000 chars used)"
    assert stm.source_event.event_id == result.event_id
    assert stm.source_event.relays == (service.relays.embedded_url,)
    assert any(isinstance(e, DocumentChanged) and e.origin == "local" and e.type is ST for e in seen)
    assert sum(isinstance(e, PromptAssembled) for e in seen) == 2
    with pytest.raises(AgentError):
        await service.documents.save(ST, "x" * 8001)


async def test_a_newer_version_from_another_device_reaches_cache_and_prompt(service: AppService) -> None:
    seen: list[Any] = []
    service.add_listener(seen.append)
    first = await service.documents.save(ST, "old plan")
    device = await reader_for(service.relays.embedded_url)
    try:
        newer = memory_event(AGENT_KEY, "new plan from the laptop", first.created_at + 3)
        assert (await device.publish(newer, timeout=2)).any_accepted
        await wait_for(lambda: service.documents.snapshot(ST).content == "new plan from the laptop")
        # A stranger's memory with our d tag: the relay's allow-list refuses it (the store would ignore it too).
        stranger = memory_event(OTHER_KEY, "hijack", first.created_at + 10, encrypt_to=OTHER_KEY)
        assert "blocked" in (await device.publish(stranger, timeout=2)).summary()
    finally:
        await device.close()
    assert any(isinstance(e, DocumentChanged) and e.origin == "remote" for e in seen)
    prompt = await service.prompt.dry_run(await service.chat.new_session())
    assert "new plan from the laptop" in section(prompt, "short_term_memory").content
    assert service.documents.snapshot(ST).event_id == newer.id


async def test_long_term_memory_and_admin_context_through_the_tools(tmp_path: Path) -> None:
    cfg = make_config()
    cfg.admin.pubkey = ADMIN_KEY.npub
    async with AppService(cfg, data_dir=tmp_path / "d", env=env_for(), relay_client_options=fast_client_kwargs(),
                          ) as svc:
        seen: list[Any] = []
        svc.add_listener(seen.append)
        saved = await svc.chat.dispatch_tool("memory_save", json.dumps({"type": "long_term", "content": "Ada: tea."}))
        assert not saved.is_error, saved.content
        read = await svc.chat.dispatch_tool("my_memory", "{}")
        assert "Ada: tea." in json.loads(read.content)["content"]
        assert (await svc.documents.load_long_term()).content == "Ada: tea."
        internal = await svc.chat.dispatch_tool("memory_short_term_read", "{}")
        assert internal.is_error  # not for the model
        offered = svc.prompt.tool_names_offered()
        assert {"memory_save", "my_memory", "nostr_admin_profile", "read_file"} <= set(offered)
        assert "memory_short_term_read" not in offered
        # The admin publishes a profile elsewhere: the live subscription brings it into the next prompt.
        device = await reader_for(svc.relays.embedded_url)
        try:
            assert (await device.publish(profile_event(ADMIN_KEY, name="Ada Admin"), timeout=2)).any_accepted
        finally:
            await device.close()
        await wait_for(lambda: svc.identity.snapshot().admin.profile.get("name") == "Ada Admin")
        assert any(isinstance(e, SelfContextChanged) and e.who == "admin" for e in seen)
        prompt = await svc.prompt.dry_run(await svc.chat.new_session())
        assert "- name: Ada Admin" in section(prompt, "admin_profile").content


async def test_a_busy_port_falls_back_so_a_second_instance_works(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        cfg = make_config(embedded_port=port)
        svc = AppService(cfg, data_dir=tmp_path / "d", env=env_for(), relay_client_options=fast_client_kwargs())
        warnings: list[str] = []
        svc.add_listener(lambda e: warnings.append(e.message) if isinstance(e, ServiceWarning) else None)
        async with svc:
            assert svc.relays.embedded_url != f"ws://127.0.0.1:{port}"
            assert any(f"port {port} is taken by another program" in w for w in warnings)
            assert (await svc.documents.save(ST, "still works")).any_accepted


async def test_model_choice_is_remembered_and_env_wins(tmp_path: Path) -> None:
    data = tmp_path / "d"
    cfg = make_config()
    cfg.llm.model, cfg.llm.api_base, cfg.llm.api_key_env = "openai/from-config", "http://cfg/v1", "CFG_KEY"
    svc = AppService(cfg, data_dir=data, env=env_for())
    assert svc.model.name == "openai/from-config" and svc.model.configured and svc.model.source == "config"
    assert svc.model.settings == ModelSettings("openai/from-config", "http://cfg/v1", "CFG_KEY")
    svc.model.set(ModelSettings("openai/switched", "http://local:8080/v1", "LOCAL_KEY"))
    assert read_state(data) == {"model": "openai/switched", "model_api_base": "http://local:8080/v1",
                                "model_api_key_env": "LOCAL_KEY", "model_no_key": False}
    again = AppService(cfg, data_dir=data, env=env_for())
    assert again.model.settings == ModelSettings("openai/switched", "http://local:8080/v1", "LOCAL_KEY")
    assert again.model.source == "state" and "state.toml" in again.model.explain()
    assert again.model.shadowed() is None
    cfg_env = make_config()
    cfg_env.llm.model = "openai/from-env"  # what load_config does with $DIDACTYL_MODEL
    shadowed = AppService(cfg_env, data_dir=data, env=env_for(DIDACTYL_MODEL="openai/from-env"))
    assert shadowed.model.name == "openai/from-env" and shadowed.model.source == "env"
    # The model chosen in the app is not silently lost: the service says what hides it and how to undo that.
    assert "DIDACTYL_MODEL" in shadowed.model.explain()
    warning = shadowed.model.shadowed()
    assert warning is not None and "openai/switched" in warning and "unset $DIDACTYL_MODEL" in warning
    shadowed.model.set("openai/chosen-now")  # used now; the variable wins again at the next start
    assert shadowed.model.name == "openai/chosen-now" and "next start" in (shadowed.model.shadowed() or "")
    with pytest.raises(ConfigError) as refused:
        shadowed.model.set(ModelSettings("openai/x", "", "sk-live-this-is-a-key!"))
    assert "sk-live" not in refused.value.message  # a key pasted in the wrong field is never echoed
    assert not AppService(make_config(), data_dir=tmp_path / "fresh", env=env_for()).model.configured


async def test_no_model_configured_fails_the_turn_cleanly(service: AppService) -> None:
    session = await service.chat.new_session()
    events = [e async for e in service.chat.run_turn(session, "hello")]
    assert len(events) == 1 and isinstance(events[0], TurnFailed) and not events[0].retryable
    assert "DIDACTYL_MODEL" in events[0].message
    # The message stays in the chat, marked; it is never sent to a model again.
    assert (await service.chat.session_messages(session)) == [{"role": "user", "content": "hello", "status": "failed"}]
    assert (await service.prompt.dry_run(session, "again")).history == ()


async def test_chat_turn_with_a_memory_save_tool_call(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        cfg = make_config()
        cfg.llm.model = "openai/stub-model"
        cfg.llm.api_base = stub.base_url
        cfg.llm.api_key_env = "STUB_KEY"
        cfg.llm.timeout_s = 5.0
        cfg.memory.backend = "none"
        async with AppService(cfg, data_dir=tmp_path / "d", env=env_for(STUB_KEY="sk-stub"),
                              relay_client_options=fast_client_kwargs()) as svc:
            stub.script(
                Reply.tools(ToolCall("memory_save", json.dumps({"type": "short_term", "content": "Ada likes tea"}))),
                Reply.text_reply("Noted: you like tea."),
            )
            session = await svc.chat.new_session()
            events = [e async for e in svc.chat.run_turn(session, "Remember that I like tea.")]
            assert isinstance(events[0], TurnStarted)
            done = events[-1]
            assert isinstance(done, TurnFinished), events[-1]
            assert done.reply == "Noted: you like tea."
            assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Noted: you like tea."
            [call] = [e for e in events if isinstance(e, ToolCallFinished)]
            assert call.name == "memory_save" and not call.is_error
            assert svc.documents.snapshot(ST).content == "Ada likes tea"
            # What the model received: the soul, the user's message, the tool list without the internal reader.
            first = stub.requests[0]
            assert first.messages[0]["role"] == "system" and first.messages[-1] == {
                "role": "user", "content": "Remember that I like tea."}
            assert "memory_save" in first.tool_names and "memory_short_term_read" not in first.tool_names
            # Persisted: the user message, the tool call, its result, the reply; the next prompt carries them.
            roles = [m["role"] for m in (await svc.chat.session_messages(session))]
            assert roles == ["user", "assistant", "tool", "assistant"]
            nxt = await svc.prompt.dry_run(session, "and now?")
            assert [m["role"] for m in nxt.history] == roles
            assert "Ada likes tea" in section(nxt, "short_term_memory").content


async def test_recall_backend_context_follows_the_history(service: AppService) -> None:
    assert service.parts.runtime.memory_manager.backend_id == "recall"
    await service.documents.save(LT, "Ada's favourite tea is oolong.\n\nThe build server is called hopper.")
    session = await service.chat.new_session()

    async def context() -> str | None:
        return (await service.prompt.dry_run(session, "which tea does Ada like?")).backend_context

    for _ in range(100):  # the long-term memory is indexed in the background
        if await context():
            break
        await asyncio.sleep(0.02)
    prompt = await service.prompt.dry_run(session, "which tea does Ada like?")
    assert prompt.backend_id == "recall" and "oolong" in prompt.backend_context
    # In the system message, after the soul's system sections ([memory] backend_context = "system", the default).
    assert prompt.backend_place == "system" and [m["role"] for m in prompt.messages] == ["system", "user"]
    assert prompt.messages[0]["content"].endswith("\n\n" + prompt.backend_context)
    service.config.memory.backend_context = "after_history"  # read at each assembly
    tail = await service.prompt.dry_run(session, "which tea does Ada like?")
    assert tail.messages[-2] == {"role": "system", "content": tail.backend_context}
    assert tail.messages[-1]["role"] == "user" and "oolong" not in tail.messages[0]["content"]
    assert "memory_query" in service.prompt.tool_names_offered()


async def test_a_loose_key_file_stops_start_and_leaves_nothing_running(tmp_path: Path) -> None:
    from didactyl_tui.agent.identity.keystore import key_file_path, write_key_file
    from didactyl_tui.errors import ConfigError

    data = tmp_path / "d"
    path = write_key_file(key_file_path(data), AGENT_KEY)
    path.chmod(0o644)
    svc = AppService(make_config(), data_dir=data, env={})
    with pytest.raises(ConfigError, match="chmod 600"):
        await svc.start()
    assert not svc.started  # nothing left running: no relay, no pool


async def test_no_relay_answering_means_no_profile_overwrite(tmp_path: Path) -> None:
    from relay_servers import free_port

    dead = f"ws://127.0.0.1:{free_port()}"
    cfg = make_config(embedded=False, urls=[dead], timeout_s=0.5)
    warnings: list[str] = []
    svc = AppService(cfg, data_dir=tmp_path / "d", env=env_for(), relay_client_options=fast_client_kwargs())
    svc.add_listener(lambda e: warnings.append(e.message) if isinstance(e, ServiceWarning) else None)
    async with svc:
        assert not svc.identity.snapshot().agent.loaded
        assert svc.identity.snapshot().agent.profile_event is None  # nothing signed over an unread profile
        assert not svc.documents.snapshot(ST).loaded
        result = await svc.documents.save(ST, "kept locally")
        assert not result.any_accepted and [p.state for p in (await svc.documents.pending_publishes())] == ["pending"]
    assert warnings == []  # relay trouble shows in relay_states, not as a flood of warnings
