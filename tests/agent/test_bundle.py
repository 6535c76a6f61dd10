"""Backup bundles: export → import into an empty data dir restores events and conversations exactly;
a tampered bundle is refused naming the event that failed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from agent_support import (
    AGENT_KEY,
    NOW,
    OTHER_KEY,
    Clock,
    make_store,
    memory_event,
    profile_event,
    soul_event,
    tasks_event,
)

from didactyl_tui.agent.bundle import (
    MAX_EVENTS,
    PART_BYTES,
    BundleError,
    read_bundle,
    session_record,
    write_bundle,
)
from didactyl_tui.agent.conversations.records import export_records, restore_records
from didactyl_tui.agent.conversations.store import ConversationStore
from didactyl_tui.agent.soul.template import default_template
from didactyl_tui.agent.tasks.task_list import TaskList
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.pool import RelayPool


def _events() -> list[Event]:
    tasks, _ = TaskList().add("back up the agent", now=NOW)
    return [
        memory_event(AGENT_KEY, "Ada likes tea.", NOW),
        memory_event(AGENT_KEY, "Long story.", NOW, d="long_term_memory"),
        soul_event(AGENT_KEY, default_template(), NOW),
        tasks_event(AGENT_KEY, tasks, NOW),
        profile_event(AGENT_KEY, name="didactyl"),
    ]


def _fill(store: ConversationStore) -> None:
    first = store.new_session()
    store.append(first, [{"role": "user", "content": "hello ✨"}, {"role": "assistant", "content": "hi"}])
    second = store.new_session("tools")
    store.append(second, [
        {"role": "user", "content": "save it"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "memory_save", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"ok\": true}"},
        {"role": "assistant", "content": [{"type": "text", "text": "saved"}]},
    ])


def _view(store: ConversationStore) -> list:
    return [(i, store.messages(i.id), [(c.call_id, c.name, c.arguments, c.result) for c in store.tool_calls(i.id)])
            for i in store.list_sessions()]


async def test_export_then_import_into_an_empty_data_dir_restores_everything_exactly(tmp_path: Path) -> None:
    old = ConversationStore(tmp_path / "old" / "conversations.sqlite3", clock=Clock())
    _fill(old)
    events = _events()
    text = write_bundle(AGENT_KEY, [*events, events[0]], export_records(old), created_at=NOW, rng=random.Random(1))
    assert "hello" not in text and "Ada likes tea" not in text  # conversations and memory stay encrypted

    bundle = read_bundle(text, AGENT_KEY)
    assert bundle.events == tuple(events) and bundle.agent == AGENT_KEY.public_key_hex
    new = ConversationStore(tmp_path / "new" / "conversations.sqlite3", clock=Clock(NOW + 999))
    assert restore_records(new, bundle.sessions) == 2
    assert _view(new) == _view(old)
    soul = next(e for e in bundle.events if e.kind == 31120)
    assert (await make_store(AGENT_KEY, RelayPool([])).read(soul))[0].sections == default_template().sections
    tasks = next(e for e in bundle.events if e.d_tag == "tasks")
    assert (await make_store(AGENT_KEY, RelayPool([])).read(tasks))[0].tasks[0].title == "back up the agent"
    with pytest.raises(AgentError, match="already exists"):
        restore_records(new, bundle.sessions[:1])  # an import never overwrites a conversation


def test_rust_nostr_verifies_every_event_of_a_bundle() -> None:
    nostr_sdk = pytest.importorskip("nostr_sdk")
    data = json.loads(write_bundle(AGENT_KEY, _events(), [], created_at=NOW))
    for item in data["events"] + data["conversations"]:
        assert nostr_sdk.Event.from_json(json.dumps(item)).verify()


def test_large_conversations_are_cut_into_several_parts_that_join_back() -> None:
    long_text = "é🌙x" * 30_000  # 210,000 UTF-8 bytes: several parts, cut between characters
    records = [session_record("s1", "long", 1.0, 2.0, [{"role": "user", "content": long_text}])]
    text = write_bundle(AGENT_KEY, [], records, created_at=NOW, rng=random.Random(2))
    parts = json.loads(text)["conversations"]
    assert len(parts) >= 210_000 // PART_BYTES
    assert read_bundle(text, AGENT_KEY).sessions == tuple(records)
    assert write_bundle(AGENT_KEY, [], records, created_at=NOW, rng=random.Random(2)) == text


def _tamper(text: str, change) -> str:
    data = json.loads(text)
    change(data)
    return json.dumps(data)


def test_a_tampered_bundle_is_refused_naming_the_event() -> None:
    records = [session_record("s1", "t", 1.0, 2.0, [{"role": "user", "content": "x" * (PART_BYTES + 10)}])]
    text = write_bundle(AGENT_KEY, _events(), records, created_at=NOW, rng=random.Random(3))
    data = json.loads(text)
    soul_id = data["events"][2]["id"]
    stranger = profile_event(OTHER_KEY, name="mallory").to_dict()
    other = json.loads(write_bundle(AGENT_KEY, [], records, created_at=NOW + 1, rng=random.Random(3)))
    cases = [
        (lambda d: d["events"][2].update(content=d["events"][2]["content"][:-4] + "AAA="),
         rf"event #3 \(kind 31120, id {soul_id[:12]}…\) failed verification: event id does not match"),
        (lambda d: d["events"][0].update(sig="44" * 64), "event #1 .* failed verification: bad signature"),
        (lambda d: d["events"].append(stranger), r"event #6 \(kind 0, .*\) was signed by .*not by this agent"),
        (lambda d: d["events"].append({"id": "x"}), "event #6 is malformed"),
        (lambda d: d["conversations"].reverse(), "part #1 .* is out of place"),
        (lambda d: d["conversations"].pop(), "part #1 .* is out of place"),
        (lambda d: d["conversations"].__setitem__(1, other["conversations"][1]), "part #2 .* is out of place"),
        (lambda d: d["conversations"][0].update(sig="55" * 64), "conversations part #1 .* bad signature"),
        (lambda d: d.update(conversations=[]), "no conversations part"),
        (lambda d: d.update(agent=OTHER_KEY.public_key_hex), "belongs to agent"),
        (lambda d: d.update(format="didactyl-bundle/0"), "not a didactyl-bundle/1 file"),
        (lambda d: d.update(created_at="yesterday"), "no created_at"),
        (lambda d: d.update(events={}), "an events list"),
    ]
    for change, reason in cases:
        with pytest.raises(BundleError, match=reason):
            read_bundle(_tamper(text, change), AGENT_KEY)
    with pytest.raises(BundleError, match="not valid JSON"):
        read_bundle(text[:-1], AGENT_KEY)
    with pytest.raises(BundleError, match="over the 1,000-byte limit"):
        read_bundle(text, AGENT_KEY, max_bytes=1000)
    with pytest.raises(BundleError, match="belongs to agent"):
        read_bundle(text, OTHER_KEY)
    assert MAX_EVENTS >= 10_000


def test_export_refuses_foreign_or_broken_events_and_bad_sessions() -> None:
    with pytest.raises(BundleError, match="not by this agent"):
        write_bundle(AGENT_KEY, [profile_event(OTHER_KEY, name="x")], [], created_at=NOW)
    broken = Event.from_dict({**_events()[0].to_dict(), "content": "edited"})
    with pytest.raises(BundleError, match=r"event #1 .* failed verification"):
        write_bundle(AGENT_KEY, [broken], [], created_at=NOW)
    for bad, reason in (({"id": "", "title": "t"}, "string id"),
                        ({"id": "s", "title": "t", "created_at": "x", "updated_at": 1, "messages": []}, "created_at"),
                        ({"id": "s", "title": "t", "created_at": 1, "updated_at": 1, "messages": [{"role": "bot"}]},
                         "message #1 has no valid role")):
        with pytest.raises(BundleError, match=reason):
            write_bundle(AGENT_KEY, [], [bad], created_at=NOW)


def test_a_bad_message_in_a_restored_session_leaves_nothing_behind(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3", clock=Clock())
    with pytest.raises(AgentError, match="tool_call_id"):
        store.restore_session("s1", "t", 1.0, 2.0,
                              [{"role": "user", "content": "ok"}, {"role": "tool", "content": "x"}])
    assert store.list_sessions() == []
