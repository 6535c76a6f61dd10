"""The soul and the task list, live: a kind 31120 published elsewhere while the service (or the TUI) runs is
judged as at start — newer and clean: the next prompt assembly uses it and the views hear SoulChanged (a toast in
the TUI); newer but bad: refused with a warning naming the event and section, the soul in use stays. A newer task
list reaches the next prompt too. Real relays: rust-nostr's, with rust-nostr's client as the other program; the
shared embedded relay, with our CLI as the other program."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, soul_event, tasks_event, wait_for
from bad_inputs_support import recording_app
from cli_support import Served, cli_env, cli_env_on, didactyl
from llm_stub import LlmStub, Reply
from relay_servers import RelayUnderTest, fast_client_kwargs
from sync_support import rust_publish
from tui_support import SIZE, TEST_KEY, LoopIoWatch, make_config, make_env, started
from tui_support import wait_for as wait_in_app

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.soul.template import SoulTemplate, TemplateSection
from didactyl_tui.agent.tasks.task_list import TaskList
from didactyl_tui.config import Config
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.kinds import SOUL
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import ServiceEvent, ServiceWarning, SoulChanged

nostr_sdk = pytest.importorskip("nostr_sdk")


def _config(url: str) -> Config:
    cfg = Config()
    cfg.relays.embedded.enabled = False
    cfg.relays.urls = [url]
    cfg.relays.timeout_s = 3.0
    cfg.memory.backend = "none"
    return cfg


async def _rust_client_publishes_soul(url: str, sections: list[dict] | str, created_at: int) -> str:
    """Another program (rust-nostr's client) with the agent's key publishes a plain kind 31120 (``sections``: our
    JSON document's sections, or a document's text as it is)."""
    keys = nostr_sdk.Keys.parse(AGENT_KEY.secret_hex())
    document = sections if isinstance(sections, str) else json.dumps({"format": "didactyl-soul/1",
                                                                       "sections": sections})
    event = (nostr_sdk.EventBuilder(nostr_sdk.Kind(SOUL), document)
             .tags([nostr_sdk.Tag.parse(["d", "soul"]), nostr_sdk.Tag.parse(["app", "didactyl"])])
             .custom_created_at(nostr_sdk.Timestamp.from_secs(created_at)).finalize(keys))
    client = nostr_sdk.Client()
    await client.add_relay(nostr_sdk.RelayUrl.parse(url))
    await client.connect()
    try:
        output = await client.send_event(event)
    finally:
        await client.shutdown()
    assert output.success, output
    return output.id.to_hex()


async def _first_section(svc: AppService) -> str:
    assembly = await svc.prompt.dry_run("live-soul-check")
    return assembly.layers[0].content


async def test_a_newer_soul_from_rust_nostr_is_used_by_the_next_prompt_and_a_bad_one_is_refused(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    heard: list[ServiceEvent] = []
    svc = AppService(_config(rust_relay.url), data_dir=tmp_path / "data", env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                     relay_client_options=fast_client_kwargs())
    svc.add_listener(heard.append)
    async with svc:
        await asyncio.wait_for(svc.parts.runtime.tasks.settle(10), 15)  # the initial soul, published at start
        assert svc.soul.view().event_id is not None
        # A soul published by this service is not news when the live subscription echoes it.
        ours = SoulTemplate((TemplateSection("persona", "system", None, "You are Local Didactyl.", True),), "test")
        assert (await svc.soul.publish(ours)).any_accepted
        assert await _first_section(svc) == "You are Local Didactyl."

        now = int(time.time())
        good_id = await _rust_client_publishes_soul(rust_relay.url, [
            {"section": "persona", "content": "You are Relay Didactyl."},
            {"section": "agent_npub", "tool": "my_npub"}], now + 30)

        async def uses_the_relay_soul() -> bool:
            return await _first_section(svc) == "You are Relay Didactyl."

        await wait_for(uses_the_relay_soul, timeout=20)
        assembly = await svc.prompt.dry_run("live-soul-check")
        assert [(x.section, x.content) for x in assembly.layers[:2]] == [
            ("persona", "You are Relay Didactyl."), ("agent_npub", AGENT_KEY.npub)]
        assert svc.soul.view().event_id == good_id
        changed = [e for e in heard if isinstance(e, SoulChanged)]
        assert [(e.event_id, e.sections, e.relay) for e in changed] == [
            (good_id, ("persona", "agent_npub"), rust_relay.url)]

        bad_id = await _rust_client_publishes_soul(rust_relay.url, [
            {"section": "persona", "content": "You are Broken Didactyl."},
            {"section": "weather_report", "tool": "get_weather"}], now + 60)

        def refusals() -> list[str]:
            return [e.message for e in heard if isinstance(e, ServiceWarning) and bad_id[:12] in e.message]

        await wait_for(lambda: bool(refusals()), timeout=20)
        [refusal] = refusals()
        assert "weather_report" in refusal and "get_weather" in refusal
        assert await _first_section(svc) == "You are Relay Didactyl."  # the soul in use stays
        assert svc.soul.view().event_id == good_id
        assert [e.event_id for e in heard if isinstance(e, SoulChanged)] == [good_id]
        # Both are kept in the soul's history (the refused one with why it cannot be used: the linter refused it).
        async def both_kept() -> bool:
            return {good_id, bad_id} <= {v.event_id for v in await svc.documents.history(DocumentKey.SOUL)}

        await wait_for(both_kept, timeout=10)
        history = {v.event_id: v for v in await svc.documents.history(DocumentKey.SOUL)}
        assert history[good_id].current and history[good_id].origin == "remote"
        assert "get_weather" in history[bad_id].problem and not history[bad_id].current
        assert history[bad_id].note.startswith("not used: ")


async def test_the_tui_tells_of_a_soul_published_by_the_cli_and_of_a_refused_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    app = recording_app(data, make_config(publish_profile=False), make_env())
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await started(pilot)
        url = app.service.relays.embedded_url
        assert url is not None
        # Our CLI, a second process on the same data dir (the shared embedded relay), publishes a soul whose
        # section names look like markup: the toast must show them as they are.
        soul_file = tmp_path / "soul.json"
        soul_file.write_text(json.dumps({"format": "didactyl-soul/1", "sections": [
            {"section": "[b]persona[/]", "content": "You are CLI Didactyl."},
            {"section": "agent_npub", "tool": "my_npub"}]}))
        with LoopIoWatch() as watch:  # the soul (encrypted to self) is read off the loop the UI runs on
            published = await asyncio.to_thread(didactyl, cli_env_on(tmp_path, data), "soul", "publish", "--file",
                                                str(soul_file), "--json")
            assert published.returncode == 0, published.stderr
            cli_id = json.loads(published.stdout)["event_id"]
            # (The CLI's start published the configured soul first, none being on the relay: a toast of its own.)
            toast = await wait_in_app(pilot, lambda: [t for t in app.notified_with("Soul") if cli_id[:12] in t], 20,
                                      lambda: f"the soul toast; shown: {app.shown_toasts()}")
        assert not [call for call in watch.calls if call.startswith("decrypt")], watch.calls
        assert toast == [f"Soul: A newer soul (event {cli_id[:12]}…: [b]persona[/], agent_npub) is used from the "
                         "next message on."]
        prompt = await app.service.prompt.dry_run(await app.service.chat.new_session(), "hi")
        assert (prompt.layers[0].section, prompt.layers[0].content) == ("[b]persona[/]", "You are CLI Didactyl.")

        # A newer soul naming an unknown tool (signed with the agent's key, sent straight to the relay).
        bad = soul_event(TEST_KEY, SoulTemplate((
            TemplateSection("[red]weather[/]", "system", "get_weather", None, True),), "test"),
            int(time.time()) + 30)
        async with RelayPool([url], **fast_client_kwargs()) as pool:
            assert (await pool.publish(bad, timeout=5)).any_accepted

        def refusal() -> list[str]:
            return [t for t in app.notified_with("Warning") if bad.id[:12] in t]

        [line] = await wait_in_app(pilot, refusal, 20, "the refusal toast")
        assert "'[red]weather[/]'" in line and "get_weather" in line
        prompt = await app.service.prompt.dry_run(await app.service.chat.new_session(), "hi")
        assert prompt.layers[0].content == "You are CLI Didactyl."  # the soul in use stays
        assert app.service.soul.view().event_id == cli_id


SEED_SOUL = """\
# written by another client, the way the seeds write a soul
- section: persona
  role: system
  content: You are Seed Didactyl.
- section: tasks
  role: system
  tool: tasks_open_read
  skip_if_empty: true
"""


async def test_a_soul_in_the_seeds_list_form_from_another_client_is_read_and_used(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    soul_id = await _rust_client_publishes_soul(rust_relay.url, SEED_SOUL, int(time.time()) - 5)
    heard: list[ServiceEvent] = []
    svc = AppService(_config(rust_relay.url), data_dir=tmp_path / "data", env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                     relay_client_options=fast_client_kwargs())
    svc.add_listener(heard.append)
    async with svc:
        view = svc.soul.view()
        assert view.event_id == soul_id and view.template.names == ["persona", "tasks"]
        assert await _first_section(svc) == "You are Seed Didactyl."
        assert not [e for e in heard if isinstance(e, ServiceWarning) and soul_id[:12] in e.message]
        # Its history shows it in the one editable form (our JSON: versions in either form diff line by line);
        # the editor's next save publishes that form.
        [version] = await svc.documents.history(DocumentKey.SOUL)
        assert [s["section"] for s in json.loads(version.content)["sections"]] == ["persona", "tasks"]
        await svc.documents.save(DocumentKey.SOUL, version.content.replace("Seed Didactyl", "Edited Didactyl"))
        assert json.loads(svc.documents.snapshot(DocumentKey.SOUL).content)["format"] == "didactyl-soul/1"
        assert await _first_section(svc) == "You are Edited Didactyl."


async def test_a_newer_task_list_from_rust_nostr_reaches_the_running_service_and_its_next_prompt(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    svc = AppService(_config(rust_relay.url), data_dir=tmp_path / "data", env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                     relay_client_options=fast_client_kwargs())
    async with svc:
        await svc.parts.runtime.tool_context.tasks.add("water the plants")
        now = int(time.time())
        other_device, _ = TaskList().add("call Ana", note="about the van", now=now)
        ev = tasks_event(AGENT_KEY, other_device, now + 30)  # NIP-44 to self, as ours are
        await rust_publish(rust_relay.url, ev)  # rust-nostr's client sends it, as another program would
        await wait_for(lambda: [t.title for t in svc.documents.value(DocumentKey.TASKS).tasks] == ["call Ana"],
                       timeout=20)
        tasks = next(x for x in (await svc.prompt.dry_run("live-tasks-check")).layers if x.section == "tasks")
        assert "#1 call Ana — about the van" in tasks.content and "water" not in tasks.content


async def test_serve_uses_a_soul_published_while_it_runs_for_the_next_direct_message(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    admin = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    agent_pub = nostr_sdk.PublicKey.parse(AGENT_KEY.public_key_hex)
    async with LlmStub() as stub, RelayPool([rust_relay.url], **fast_client_kwargs()) as pool:
        config = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                  f'[relays]\nembedded = false\nurls = ["{rust_relay.url}"]\ntimeout_s = 3.0\n'
                  f'[admin]\npubkey = "{ADMIN_KEY.public_key_hex}"\n[memory]\nbackend = "none"\n')
        served = Served(cli_env(tmp_path, config, DIDACTYL_NSEC=AGENT_KEY.nsec(), STUB_KEY="sk-stub"))
        await served.start()
        try:
            now = int(time.time())
            good_id = await _rust_client_publishes_soul(rust_relay.url, [
                {"section": "persona", "content": "You are Relay Didactyl."}], now + 30)
            await served.wait_for(f"a newer soul is in use: event {good_id[:12]}", 30)
            bad_id = await _rust_client_publishes_soul(rust_relay.url, [
                {"section": "persona", "content": "You are Broken Didactyl."},
                {"section": "weather_report", "tool": "get_weather"}], now + 60)
            refused = await served.wait_for(bad_id[:12], 30)
            assert "weather_report" in refused and "get_weather" in refused
            stub.script(Reply.text_reply("Hello from the relay soul."))
            wrap = Event.from_json(nostr_sdk.nip17_make_private_msg(admin, agent_pub, "who are you?").as_json())
            assert (await pool.publish(wrap, timeout=3)).any_accepted
            await served.wait_for("dm answered", 60)
        finally:
            assert await served.stop() == 0, served.log
    [request] = stub.requests
    system = [m["content"] for m in request.messages if m["role"] == "system"]
    assert system[0] == "You are Relay Didactyl." and "Broken" not in json.dumps(request.messages)


async def test_a_bad_soul_refused_at_start_is_not_refused_again_when_the_live_subscription_serves_it(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    now = int(time.time())
    bad_id = await _rust_client_publishes_soul(rust_relay.url, [
        {"section": "weather_report", "tool": "get_weather"}], now - 5)
    heard: list[ServiceEvent] = []
    svc = AppService(_config(rust_relay.url), data_dir=tmp_path / "data", env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                     relay_client_options=fast_client_kwargs())
    svc.add_listener(heard.append)
    async with svc:
        # The live subscription (no since) is served the same bad soul; a good one after it shows it was read.
        good_id = await _rust_client_publishes_soul(rust_relay.url, [
            {"section": "persona", "content": "You are Relay Didactyl."}], now + 30)
        await wait_for(lambda: svc.soul.view().event_id == good_id, timeout=20)
    refusals = [e.message for e in heard if isinstance(e, ServiceWarning) and bad_id[:12] in e.message]
    assert len(refusals) == 1 and "weather_report" in refusals[0], refusals
