"""One document model (#19), checked from outside: another writer (signing with the agent's key, as any Nostr client
could) publishes a newest version that cannot be used — one that does not decrypt, does not parse, or fails the
document's checks — of each of short-term memory, long-term memory, the soul and the task list; the last good
version stays in use in the running service, in a service started afresh on the same data dir (what the CLI and
``serve`` do), and in the CLI; the next save builds on the good version and loses nothing; the warning names the
event. And: a relay that missed versions of any document holds the newest after one start; every tool-backed section
of a prompt names its source."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_support import ADMIN_KEY, OTHER_KEY, Clock, memory_event, profile_event, soul_event, tasks_event
from bad_inputs_support import cli, cli_env
from memory_support import put
from relay_servers import EmbeddedRelayUnderTest, running_relay
from self_documents_support import service_on, soul
from tui_support import TEST_KEY

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.lineage import base_of
from didactyl_tui.agent.documents.store import DocumentStore
from didactyl_tui.agent.soul.content import read_soul_text
from didactyl_tui.agent.tasks.task_list import TaskList
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import ServiceWarning

T0 = 1_760_000_000
ST, LT, SOUL, TASKS = DocumentKey.SHORT_TERM, DocumentKey.LONG_TERM, DocumentKey.SOUL, DocumentKey.TASKS


def _to_other(text: str) -> str:
    """Content encrypted to another key: a valid NIP-44 payload this agent cannot open."""
    return nip44.encrypt(text, nip44.get_conversation_key(TEST_KEY.secret_hex(), OTHER_KEY.public_key_hex))


def _bad_versions(key: DocumentKey, at: int, base: str) -> dict[str, Event]:
    """Newer versions of ``key`` that cannot be used, by cause (signed with the agent's key, based on the good one)."""
    d = key.d_tag
    if key.is_memory:
        return {"undecryptable": memory_event(TEST_KEY, "secret", at, d=d, encrypt_to=OTHER_KEY, prev=base)}
    if key is TASKS:
        over = json.dumps({"format": "didactyl-tasks/1", "next_id": 1,
                           "tasks": [{"id": 5, "title": "x", "status": "open", "note": "", "created_at": 0,
                                      "updated_at": 0}]})
        return {"undecryptable": sign_event(TEST_KEY, kind=30078, content=_to_other(TaskList().to_json()),
                                            created_at=at, tags=[["d", d], ["prev", base]]),
                "malformed": tasks_event(TEST_KEY, TaskList(), at, prev=base, content="not a task list"),
                "invalid": tasks_event(TEST_KEY, TaskList(), at, prev=base, content=over)}
    good = read_soul_text("t", soul("Whoever"))
    unknown_tool = json.dumps({"format": "didactyl-soul/1", "sections": [
        {"section": "persona", "content": "You are Broken."}, {"section": "weather", "tool": "get_weather"}]})
    return {"undecryptable": sign_event(TEST_KEY, kind=31120, content=_to_other("{}"), created_at=at,
                                        tags=[["d", d], ["encrypted", "nip44"], ["prev", base]]),
            "malformed": soul_event(TEST_KEY, good, at, prev=base, text="not json {"),
            "invalid": soul_event(TEST_KEY, good, at, prev=base, text=unknown_tool)}


async def _save_good(svc: AppService, key: DocumentKey) -> str:
    """Save a good version through the app; returns the text that must survive."""
    if key is TASKS:
        for title in ("buy milk", "call Ana"):
            assert not (await svc.chat.dispatch_tool("task_add", {"title": title})).is_error
        return svc.documents.snapshot(TASKS).content
    text = soul("Good") if key is SOUL else f"the good {key.value} text"
    await svc.documents.save(key, text)
    return svc.documents.snapshot(key).content


async def _until(check: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached: {what}")
        await asyncio.sleep(0.02)


def _warned(heard: list[Any], event_id: str) -> list[str]:
    return [e.message for e in heard if isinstance(e, ServiceWarning) and event_id[:12] in e.message]


CASES = [(key, cause) for key in (ST, LT, SOUL, TASKS) for cause in ("undecryptable", "malformed", "invalid")
         if key not in (ST, LT) or cause == "undecryptable"]


@pytest.mark.parametrize(("key", "cause"), CASES, ids=[f"{k.value}-{c}" for k, c in CASES])
async def test_a_newest_version_that_cannot_be_used_leaves_the_good_one_and_the_next_save_builds_on_it(
        relay: EmbeddedRelayUnderTest, tmp_path: Path, key: DocumentKey, cause: str) -> None:
    clock = Clock(T0)
    data = tmp_path / "data"
    heard: list[Any] = []
    first = service_on(relay, data, clock)
    first.add_listener(heard.append)
    async with first:
        good_text = await _save_good(first, key)
        good = first.documents.snapshot(key)
        assert good.event_id is not None
        bad = _bad_versions(key, int(clock.t) + 30, good.event_id)[cause]
        await put(relay.url, bad)
        # The running service: told (the event named), the good version stays in use.
        await _until(lambda: _warned(heard, bad.id), "the warning naming the bad version")
        assert "cannot be used" in _warned(heard, bad.id)[0]
        snap = first.documents.snapshot(key)
        assert (snap.content, snap.event_id, snap.unreadable.event_id) == (good_text, good.event_id, bad.id)

    # Started afresh on the same data dir (what the CLI and serve do): the relay only holds the bad version now.
    clock.t += 60
    heard.clear()
    again = service_on(relay, data, clock)
    again.add_listener(heard.append)
    async with again:
        snap = again.documents.snapshot(key)
        assert (snap.content, snap.event_id) == (good_text, good.event_id), snap
        assert snap.unreadable is not None and snap.unreadable.event_id == bad.id
        assert _warned(heard, bad.id), [getattr(e, "message", e) for e in heard]
        if key is SOUL:
            persona = (await again.prompt.dry_run("check")).layers[0]
            assert persona.content == "You are Good."
        # The next save builds on the good version: its base, dated after the bad one, nothing lost.
        if key is TASKS:
            out = await again.chat.dispatch_tool("task_add", {"title": "water plants"})
            assert not out.is_error, out.content
            tasks = again.documents.value(DocumentKey.TASKS).tasks
            assert [(t.id, t.title) for t in tasks] == [(1, "buy milk"), (2, "call Ana"), (3, "water plants")]
        else:
            edited = good_text.replace("Good", "Better") if key is SOUL else good_text + " and more"
            await again.documents.save(key, edited)
        saved = again.parts.runtime.store.current_event(key)
        assert saved is not None and base_of(saved) == good.event_id and saved.created_at > bad.created_at
        assert again.documents.snapshot(key).unreadable is None  # superseded by our save
        [held] = await relay.relay.query([key.filter(TEST_KEY.public_key_hex)])
        assert held.id == saved.id


async def test_the_cli_and_a_fresh_start_never_take_an_unreadable_task_list_as_empty(
        relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    config = (f'[relays]\nembedded = false\nurls = ["{relay.url}"]\ntimeout_s = 2.0\n[memory]\nbackend = "none"\n'
              "[agent]\npublish_profile = false\n")
    env = cli_env(tmp_path, config, DIDACTYL_NSEC=TEST_KEY.nsec())
    added = await asyncio.to_thread(cli, ["tasks", "save", "--content", TaskList().add("buy milk", now=T0)[0]
                                          .add("call Ana", now=T0)[0].to_text(), "--json"], env)
    assert added.code == 0, added.stderr
    good_id = json.loads(added.stdout)["event_id"]
    import time

    bad = tasks_event(TEST_KEY, TaskList(), int(time.time()) + 30, prev=good_id, content="not a task list")
    await put(relay.url, bad)
    listed = await asyncio.to_thread(cli, ["tasks", "--json"], env)
    assert listed.code == 0, listed.stderr
    assert [t["title"] for t in json.loads(listed.stdout)["tasks"]] == ["buy milk", "call Ana"]
    assert bad.id[:12] in listed.stderr and "cannot be used" in listed.stderr
    # A change from the command line builds on the good list (ids not reused), dated after the bad one.
    shown = await asyncio.to_thread(cli, ["tasks", "show", "--json"], env)
    data = json.loads(shown.stdout)
    assert data["event_id"] == good_id and data["unreadable"]["event_id"] == bad.id


async def test_with_no_readable_version_known_a_derived_change_is_refused_and_nothing_is_published(
        relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    bad = tasks_event(TEST_KEY, TaskList(), T0 - 10, content="not a task list")
    await put(relay.url, bad)
    async with service_on(relay, tmp_path / "fresh", clock) as svc:  # a fresh data dir: no history to fall back on
        snap = svc.documents.snapshot(TASKS)
        assert snap.unreadable is not None and not snap.known and snap.event_id is None
        out = await svc.chat.dispatch_tool("task_add", {"title": "x"})
        assert out.is_error and bad.id[:12] in out.content and "nothing in it is lost" in out.content
        assert [ev.id for ev in await relay.relay.query([TASKS.filter(TEST_KEY.public_key_hex)])] == [bad.id]
        # Replacing the list as a whole is the way on (a person chose to).
        await svc.documents.save(TASKS, TaskList().add("start again", now=T0)[0].to_text())
        assert [t.title for t in svc.documents.value(DocumentKey.TASKS).tasks] == ["start again"]


async def test_a_relay_that_missed_versions_of_any_document_holds_the_newest_after_one_start(tmp_path: Path) -> None:
    clock = Clock(T0)
    async with running_relay(tmp_path / "a") as a, running_relay(tmp_path / "b") as b:
        first = service_on(a, tmp_path / "data", clock)
        first.config.agent.publish_profile = True
        first.config.agent.contacts = [ADMIN_KEY.npub]
        async with first:
            for key in (ST, LT):
                await first.documents.save(key, f"{key.value} text")
            await first.documents.save(SOUL, soul("Kept"))
            assert not (await first.chat.dispatch_tool("task_add", {"title": "keep me"})).is_error
            await _until(lambda: all(first.documents.snapshot(k).relays for k in DocumentKey),
                         "every document on relay a")
            newest = {k: first.documents.snapshot(k).event_id for k in DocumentKey}
        # Relay b is added: one start brings it every document's newest version.
        clock.t += 30
        second = service_on(a, tmp_path / "data", clock)
        second.config.relays.urls = [a.url, b.url]
        async with second:
            async def b_holds_all() -> bool:
                held = {k: [ev.id for ev in await b.relay.query([k.filter(TEST_KEY.public_key_hex)])]
                        for k in DocumentKey}
                return all(held[k] == [newest[k]] for k in DocumentKey)

            for _ in range(300):
                if await b_holds_all():
                    break
                await asyncio.sleep(0.05)
            assert await b_holds_all()


async def test_memory_status_fix_brings_a_lagging_relay_the_newest_of_any_document(tmp_path: Path) -> None:
    clock = Clock(T0)
    async with running_relay(tmp_path / "a") as a, running_relay(tmp_path / "b") as b:
        both = service_on(a, tmp_path / "data", clock)
        both.config.relays.urls = [a.url, b.url]
        async with both:
            await both.documents.save(SOUL, soul("First"))
            assert not (await both.chat.dispatch_tool("task_add", {"title": "t"})).is_error
            first = {k: both.documents.snapshot(k).event_id for k in (SOUL, TASKS)}
        # Another writer's newer versions reach relay a only: b lags (and no outbox here holds them).
        newer = {SOUL: soul_event(TEST_KEY, read_soul_text("t", soul("Second")), T0 + 20, prev=first[SOUL]),
                 TASKS: tasks_event(TEST_KEY, TaskList().add("u", now=T0)[0], T0 + 20, prev=first[TASKS])}
        await put(a.url, *newer.values())
        clock.t += 30
        late = service_on(a, tmp_path / "data", clock)
        late.config.relays.urls = [a.url, b.url]
        late.read_only = True  # nothing repaired in the background: only the command's --fix
        async with late:
            for key in (SOUL, TASKS):
                before = await late.documents.status(key)
                assert [(r.event_id, r.lagging) for r in before.relays if r.url == b.url] == [(first[key], True)]
                fixed = await late.documents.status(key, bring_up_to_date=True)
                assert fixed.brought_up_to_date == [b.url]
                assert [ev.id for ev in await b.relay.query([key.filter(TEST_KEY.public_key_hex)])] == \
                    [newer[key].id]


async def test_every_tool_backed_section_names_its_source_event_and_relays(
        relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    await put(relay.url, profile_event(ADMIN_KEY, T0 - 50, name="Ada"))
    svc = service_on(relay, tmp_path / "data", clock)
    svc.config.admin.pubkey = ADMIN_KEY.public_key_hex
    svc.admin_pubkey = ADMIN_KEY.public_key_hex
    svc.config.agent.publish_profile = True
    svc.config.agent.contacts = [ADMIN_KEY.npub]
    async with svc:
        await svc.documents.save(ST, "remember the milk")
        await svc.documents.save(SOUL, json.dumps({"format": "didactyl-soul/1", "sections": [
            {"section": "persona", "content": "You are Sourced."},
            {"section": "stm", "tool": "memory_short_term_read"},
            {"section": "tasks", "tool": "task_list"},
            {"section": "contacts", "tool": "nostr_agent_contacts"},
            {"section": "profile", "tool": "nostr_agent_profile"},
            {"section": "me", "tool": "agent_identity"},
            {"section": "admin", "tool": "nostr_admin_profile"}]}))
        assert not (await svc.chat.dispatch_tool("task_add", {"title": "a task"})).is_error
        await _until(lambda: all(svc.documents.snapshot(k).relays for k in (ST, SOUL, TASKS, DocumentKey.PROFILE,
                                                                 DocumentKey.CONTACTS)), "every version on the relay")
        assembly = await svc.prompt.dry_run("sources")
        ids = {k: svc.documents.snapshot(k).event_id for k in (SOUL, TASKS, DocumentKey.CONTACTS)}
    shown = {layer.section: layer for layer in assembly.layers}
    assert not any(layer.skipped for layer in assembly.layers), [(x.section, x.skip_reason) for x in assembly.layers]
    for name, layer in shown.items():
        source = layer.source_event
        assert source is not None and len(source.event_id) == 64 and source.relays == (relay.url,), (name, source)
    assert shown["persona"].source_event.event_id == ids[SOUL]  # literal text: from the soul
    assert shown["tasks"].source_event.event_id == ids[TASKS]
    assert shown["contacts"].source_event.event_id == ids[DocumentKey.CONTACTS]


async def test_a_read_only_command_delivers_a_save_waiting_in_the_outbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What the command shows must not hang on when the relay's live echo of the delivered save comes (it came
    # after the command's answer, once, on a loaded machine): here it never comes.
    monkeypatch.setattr(DocumentStore, "ingest", lambda self, url, ev: None)
    server = EmbeddedRelayUnderTest(tmp_path / "relay.sqlite3")
    await server.start()
    url = server.url
    await server.stop()  # down while the save is made
    config = (f'[relays]\nembedded = false\nurls = ["{url}"]\ntimeout_s = 10.0\n[memory]\nbackend = "none"\n'
              "[agent]\npublish_profile = false\n")
    env = cli_env(tmp_path, config, DIDACTYL_NSEC=TEST_KEY.nsec())
    waiting = TaskList().add("waiting", now=T0)[0].to_text()
    saved = await asyncio.to_thread(cli, ["tasks", "save", "--content", waiting, "--json"], env)
    assert saved.code == 1 and "kept in the outbox" in saved.stderr
    event_id = json.loads(saved.stdout)["event_id"]
    await server.start()  # back, on the same port
    try:
        shown = await asyncio.to_thread(cli, ["tasks", "show", "--json"], env)
        assert shown.code == 0, shown.stderr
        data = json.loads(shown.stdout)
        assert data["event_id"] == event_id and data["pending"] == [] and data["relays"] == [url]
        assert [ev.id for ev in await server.relay.query([TASKS.filter(TEST_KEY.public_key_hex)])] == [event_id]
    finally:
        await server.stop()
