"""What the agent knows about itself with zero config, what the model is offered, and which turns teach the
memory backend (session kinds). Real embedded relay, real litellm against the HTTP stub."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from agent_support import AGENT_KEY, wait_for
from llm_stub import LlmStub, Reply, ToolCall
from relay_servers import fast_client_kwargs
from service_support import stub_config, stub_service

from didactyl_tui.agent.conversations.session_kind import SessionKind
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.tools.permission import Decision, PermissionRequest
from didactyl_tui.agent.turn.events import TurnFinished
from didactyl_tui.service.app import AppService

pytestmark = pytest.mark.usefixtures("warm_litellm")

SELF_CONTEXT_TOOLS = ["agent_identity", "nostr_agent_profile", "nostr_agent_contacts", "nostr_agent_relays",
                      "nostr_agent_notes", "my_kind0_profile", "my_contacts", "my_relays", "my_notes", "my_npub",
                      "my_pubkey"]


def layer(assembly, name: str):
    return next(x for x in assembly.layers if x.section == name)


async def _turn(svc: AppService, message: str, kind: SessionKind) -> str:
    session = await svc.chat.new_session()
    events = [e async for e in svc.chat.run_turn(session, message, kind)]
    assert isinstance(events[-1], TurnFinished), events[-1]
    return events[-1].reply


async def test_zero_config_model_sees_every_self_context_tool_its_relays_and_no_empty_contacts(tmp_path: Path) -> None:
    async with LlmStub() as stub, stub_service(stub_config(stub.base_url), tmp_path) as svc:
        stub.script(Reply.text_reply("hi"))
        await _turn(svc, "who are you?", SessionKind.TERMINAL)
        [request] = stub.requests
        assert [n for n in request.tool_names if n in SELF_CONTEXT_TOOLS] == [
            n for n in ["agent_identity", "nostr_agent_profile", "my_kind0_profile", "nostr_agent_contacts",
                        "my_contacts", "nostr_agent_relays", "my_relays", "nostr_agent_notes", "my_notes",
                        "my_npub", "my_pubkey"]]
        system = "\n".join(m["content"] for m in request.messages if m["role"] == "system")
        assert f"- {svc.relays.embedded_url} (embedded relay on this machine)" in system
        # No contacts: the built-in soul skips the empty section (as the seeds do); the tool still says so when called.
        assert "No contacts yet" not in system and layer(await svc.prompt.dry_run("dry-run"), "agent_contacts").skipped

        # Provenance: the profile the agent published at start, as the embedded relay served it back.
        async def profile_cited() -> bool:
            source = layer(await svc.prompt.dry_run("dry-run"), "agent_profile").source_event
            return source is not None and svc.relays.embedded_url in source.relays

        await wait_for(profile_cited, timeout=10)
        assembly = await svc.prompt.dry_run("dry-run")
        profile_event = svc.identity.snapshot().agent.profile_event
        assert layer(assembly, "agent_identity").source_event.event_id == profile_event.id


async def test_offer_aliases_false_hides_only_the_aliases(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        cfg = stub_config(stub.base_url)
        cfg.tools.offer_aliases = False
        async with stub_service(cfg, tmp_path) as svc:
            stub.script(Reply.text_reply("hi"))
            await _turn(svc, "who are you?", SessionKind.TERMINAL)
    names = stub.requests[0].tool_names
    assert "nostr_agent_contacts" in names and "my_npub" in names
    assert not {"my_kind0_profile", "my_contacts", "my_relays", "my_notes"} & set(names)


async def test_only_terminal_and_dm_turns_teach_the_memory_backend(tmp_path: Path) -> None:
    async with LlmStub() as stub, stub_service(stub_config(stub.base_url, backend="recall"), tmp_path) as svc:
        recall = svc.parts.runtime.memory_manager.backend
        for word, kind in (("aubergine", SessionKind.TERMINAL), ("kohlrabi", SessionKind.DM),
                           ("parsnip", SessionKind.HEADLESS_CHAT)):
            stub.script(Reply.text_reply("noted"))
            await _turn(svc, f"I grow {word}", kind)
        await svc.prompt.dry_run("dry-run", "I grow turnip")
        found = {w for w in ("aubergine", "kohlrabi", "parsnip", "turnip") if recall.search(w, 5)}
    assert found == {"aubergine", "kohlrabi"}


async def test_task_add_saves_through_the_outbox_and_renders_in_the_prompt(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        async with stub_service(stub_config(stub.base_url), tmp_path) as svc:
            assert layer(await svc.prompt.dry_run("dry-run"), "tasks").skipped  # no tasks yet: skipped
            stub.script(Reply.tools(ToolCall("task_add", json.dumps({"title": "call Ana", "note": "about the van"}))),
                        Reply.text_reply("Added."))
            await _turn(svc, "remind me to call Ana", SessionKind.TERMINAL)
            tasks = layer(await svc.prompt.dry_run("dry-run"), "tasks")
            assert not tasks.skipped and "- [ ] #1 call Ana — about the van" in tasks.content
            assert [p.event_id for p in await svc.documents.pending_publishes()] == []  # sent, through the outbox
        # A new run reads the list back from the relay.
        async with stub_service(stub_config(stub.base_url), tmp_path) as again:
            assert [t.title for t in again.documents.value(DocumentKey.TASKS).tasks] == ["call Ana"]
            assert "#1 call Ana" in layer(await again.prompt.dry_run("dry-run"), "tasks").content


async def _note_turn(svc: AppService, stub: LlmStub, text: str, kind: SessionKind) -> dict | str:
    stub.script(Reply.tools(ToolCall("post_note", json.dumps({"text": text}))), Reply.text_reply("ok"))
    session = await svc.chat.new_session()
    events = [e async for e in svc.chat.run_turn(session, "post something", kind)]
    [call] = events[-1].tool_calls
    return call.result if call.result.startswith("Error:") else json.loads(call.result)


async def test_post_note_asks_at_the_terminal_and_is_refused_where_nobody_can_confirm(tmp_path: Path) -> None:
    asked: list[PermissionRequest] = []

    async def ask(request: PermissionRequest) -> Decision:
        asked.append(request)
        return Decision.ONCE if "yes" in request.arguments else Decision.DENY

    async with LlmStub() as stub, stub_service(stub_config(stub.base_url), tmp_path) as svc:
        assert "post_note" in svc.prompt.tool_names_offered()
        svc.permissions.register_asker(ask)
        refused = await _note_turn(svc, stub, "yes from a headless chat", SessionKind.HEADLESS_CHAT)
        assert refused.startswith("Error: not run:") and "nobody here can allow it" in refused and asked == []
        declined = await _note_turn(svc, stub, "no thanks", SessionKind.TERMINAL)
        assert declined.startswith("Error: not run: post_note was denied by you")
        posted = await _note_turn(svc, stub, "yes, hello Nostr", SessionKind.TERMINAL)
        assert posted["posted"] and posted["accepted_by"] == [svc.relays.embedded_url]
        assert [(r.tool, r.origin) for r in asked] == [("post_note", "didactyl")] * 2
        assert '"text": "yes, hello Nostr"' in asked[1].arguments


async def test_post_note_without_asking_when_config_allows(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        cfg = stub_config(stub.base_url)
        cfg.tools.post_notes_without_asking = True
        async with stub_service(cfg, tmp_path) as svc:
            posted = await _note_turn(svc, stub, "posted from a script", SessionKind.HEADLESS_CHAT)
    assert posted["posted"] and posted["accepted_by"]


async def test_another_devices_task_change_reaches_a_running_agent(tmp_path: Path) -> None:
    async with LlmStub() as stub, stub_service(stub_config(stub.base_url), tmp_path / "a") as first:
        cfg = stub_config(stub.base_url)
        cfg.relays.embedded, cfg.relays.urls = False, [first.relays.embedded_url]
        clock = [time.time() + 5]  # the other device's clock runs ahead: its version is newer
        other = AppService(cfg, data_dir=tmp_path / "b", env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                           clock=lambda: clock[0], relay_client_options=fast_client_kwargs())
        async with other:
            outcome = await other.chat.dispatch_tool("task_add", {"title": "renew the passport"})
            assert not outcome.is_error, outcome.content
        await wait_for(lambda: [t.title for t in first.documents.value(DocumentKey.TASKS).tasks]
                       == ["renew the passport"], timeout=10)
        assert "#1 renew the passport" in layer(await first.prompt.dry_run("dry-run"), "tasks").content
