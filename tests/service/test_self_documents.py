"""The soul and the task list are versioned like memory, at service level, against a real relay: their saves go
out through the memory publisher's one outbox, name their base (``["prev", id]``), are kept in the one history
(diff, rollback), and a concurrent edit from another writer is told with both texts kept — by the same rule as
memory (lineage.lost_local_edit). A soul the linter refuses publishes nothing and names its section."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agent_support import Clock, memory_event, soul_event, tasks_event
from memory_support import put
from relay_servers import EmbeddedRelayUnderTest
from self_documents_support import service_on, soul, stored
from tui_support import TEST_KEY

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.lineage import LOST_NOTE, base_of
from didactyl_tui.agent.soul.content import read_soul_text
from didactyl_tui.agent.tasks.task_list import TaskList
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.kinds import APP_DATA, SOUL
from didactyl_tui.service.events import DocumentChanged, ServiceWarning

T0 = 1_750_000_000
SOUL_V1 = soul("Version One")


def soul_text(persona: str) -> str:
    return soul(persona.removeprefix("You are ").removesuffix("."))



async def until(predicate: Any, what: str, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)
    assert predicate(), what


async def test_soul_and_task_saves_take_the_memory_path(relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    async with service_on(relay, tmp_path / "a", clock) as svc:
        mem = await svc.documents.save(DocumentKey.SHORT_TERM, "groceries")
        clock.t += 5
        first = await svc.documents.save(DocumentKey.SOUL, SOUL_V1)
        clock.t += 5
        second = await svc.documents.save(DocumentKey.SOUL, soul_text("You are Version Two."))
        clock.t += 5
        added = await svc.chat.dispatch_tool("task_add", {"title": "water the plants"})
        assert not added.is_error, added.content
        clock.t += 5
        edited = svc.documents.value(DocumentKey.TASKS).to_text().replace('"status": "open"', '"status": "in_progress"')
        tasks = await svc.documents.save(DocumentKey.TASKS, edited)
        assert [t.status for t in svc.documents.value(DocumentKey.TASKS).tasks] == ["in_progress"]
        # One outbox holds every self-document's versions: memory, soul, tasks.
        rt = svc.parts.runtime
        entries = {e.event.id: e for e in await asyncio.to_thread(rt.publisher.outbox.entries)}
        for result in (mem, first, second, tasks):
            assert result.event_id in entries and entries[result.event_id].accepted_by == [relay.url]
        # Each version names its base, as memory's does.
        [soul_now] = await stored(relay, SOUL, "soul")
        assert soul_now.id == second.event_id and base_of(soul_now) == first.event_id
        [tasks_now] = await stored(relay, APP_DATA, "tasks")
        assert tasks_now.id == tasks.event_id and base_of(tasks_now) is not None
        # The one history keeps them (this device's saves, the current one marked).
        souls = await svc.documents.history(DocumentKey.SOUL)
        assert [(v.event_id, v.origin, v.current) for v in souls] == [
            (second.event_id, "local", True), (first.event_id, "local", False)]
        assert read_soul_text("t", souls[1].content).sections[0].content == "You are Version One."
        task_versions = await svc.documents.history(DocumentKey.TASKS)
        assert len(task_versions) == 2 and task_versions[0].current
        assert base_of(task_versions[0].event) == task_versions[1].event_id
        shown = TaskList.from_json(svc.documents.snapshot(DocumentKey.TASKS).content)
        assert shown.tasks[0].status == "in_progress" and shown.tasks[0].updated_at == int(clock.t)  # dated now


async def test_a_soul_the_linter_refuses_names_the_section_and_publishes_nothing(
        relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    async with service_on(relay, tmp_path / "a", clock) as svc:
        good = await svc.documents.save(DocumentKey.SOUL, SOUL_V1)
        clock.t += 5
        bad = SOUL_V1.replace('"tool": "task_list"', '"tool": "weather_now"')
        with pytest.raises(AgentError) as refused:
            await svc.documents.save(DocumentKey.SOUL, bad)
        assert "section 'tasks'" in refused.value.message and "weather_now" in refused.value.message
        with pytest.raises(AgentError) as not_json:
            await svc.documents.save(DocumentKey.SOUL, "{ not json")
        assert "not valid JSON" in not_json.value.message
        assert [ev.id for ev in await stored(relay, SOUL, "soul")] == [good.event_id]
        assert [v.event_id for v in await svc.documents.history(DocumentKey.SOUL)] == [good.event_id]
        entries = await asyncio.to_thread(svc.parts.runtime.publisher.outbox.entries)
        assert [e.event.id for e in entries if e.event.kind == SOUL] == [good.event_id]
        assert svc.soul.view().event_id == good.event_id


async def test_history_diff_and_rollback_of_the_soul_and_the_tasks(
        relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    async with service_on(relay, tmp_path / "a", clock) as svc:
        one = await svc.documents.save(DocumentKey.SOUL, SOUL_V1)
        clock.t += 5
        two = await svc.documents.save(DocumentKey.SOUL, soul_text("You are Version Two."))
        diff = await svc.documents.diff(DocumentKey.SOUL, one.event_id, two.event_id)
        assert '-   "content": "You are Version One.",' in diff.splitlines()
        assert '+   "content": "You are Version Two.",' in diff.splitlines()
        clock.t += 5
        back = await svc.documents.rollback(DocumentKey.SOUL, one.event_id[:10])
        assert svc.soul.view().template.sections[0].content == "You are Version One."
        now = (await svc.documents.history(DocumentKey.SOUL))[0]
        assert now.event_id == back.event_id and now.note == f"rollback to {one.event_id[:8]}"
        assert base_of(now.event) == two.event_id
        with pytest.raises(AgentError, match="already the current"):
            await svc.documents.rollback(DocumentKey.SOUL, back.event_id)
        # The task list: the same history, diff and rollback.
        await svc.chat.dispatch_tool("task_add", {"title": "first"})
        clock.t += 5
        await svc.chat.dispatch_tool("task_add", {"title": "second"})
        older, newer = (await svc.documents.history(DocumentKey.TASKS))[::-1][:2]
        diff = await svc.documents.diff(DocumentKey.TASKS, older.event_id, newer.event_id)
        assert '+ {"id": 2, "title": "second"' in diff
        clock.t += 5
        await svc.documents.rollback(DocumentKey.TASKS, older.event_id)
        assert [t.title for t in svc.documents.value(DocumentKey.TASKS).tasks] == ["first"]


async def test_a_concurrent_soul_edit_from_another_writer_is_told_and_both_texts_kept(
        relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    async with service_on(relay, tmp_path / "a", clock) as svc:
        heard: list[Any] = []
        svc.add_listener(heard.append)
        base = await svc.documents.save(DocumentKey.SOUL, SOUL_V1)
        clock.t += 10
        ours = await svc.documents.save(DocumentKey.SOUL, soul_text("You are Ours."))
        # Another writer edited the base, not ours: a concurrent edit, newer than ours.
        theirs = soul_event(TEST_KEY, read_soul_text("t", soul_text("You are Theirs.")), int(clock.t) + 10,
                            prev=base.event_id)
        await put(relay.url, theirs)
        await until(lambda: any(isinstance(e, DocumentChanged) and e.lost_local for e in heard), "told of the loss")
        [told] = [e for e in heard if isinstance(e, DocumentChanged) and e.lost_local]
        assert (told.type, told.lost_event_id, told.winner_event_id) == ("soul", ours.event_id, theirs.id)
        assert any(isinstance(e, ServiceWarning) and "concurrent edit of the soul" in e.message for e in heard)
        assert svc.soul.view().event_id == theirs.id  # theirs (newer) is in use
        versions = {v.event_id: v for v in await svc.documents.history(DocumentKey.SOUL)}
        assert LOST_NOTE in versions[ours.event_id].note and versions[theirs.id].current
        assert "You are Ours." in versions[ours.event_id].content  # both texts kept
        assert "You are Theirs." in versions[theirs.id].content
        # A merged save builds on theirs: a later edit for every device.
        clock.t += 20
        merged = await svc.documents.save(DocumentKey.SOUL, soul_text("You are Ours and Theirs."))
        [on_relay] = await stored(relay, SOUL, "soul")
        assert on_relay.id == merged.event_id and base_of(on_relay) == theirs.id


async def test_a_second_service_changing_the_tasks_reaches_the_first_live(
        relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    async with service_on(relay, tmp_path / "a", clock) as first, service_on(relay, tmp_path / "b", clock) as second:
        heard: list[Any] = []
        first.add_listener(heard.append)
        clock.t += 5
        assert not (await second.chat.dispatch_tool("task_add", {"title": "from the other writer"})).is_error
        await until(lambda: [t.title for t in first.documents.value(DocumentKey.TASKS).tasks]
                    == ["from the other writer"], "tasks live")
        assert any(isinstance(e, DocumentChanged) and e.type == "tasks" and e.origin == "remote" for e in heard)
        versions = await first.documents.history(DocumentKey.TASKS)
        assert versions[0].current and "from the other writer" in versions[0].content
        # A newer task list that does not read is not used: told, kept in the history, the list stays.
        await put(relay.url, memory_event(TEST_KEY, "not a task list", int(clock.t) + 30, d="tasks"))
        await until(lambda: any(isinstance(e, ServiceWarning) and "task list" in e.message
                                and "cannot be used" in e.message for e in heard), "told it was not used")
        assert [t.title for t in first.documents.value(DocumentKey.TASKS).tasks] == ["from the other writer"]
        assert "not used" in (await first.documents.history(DocumentKey.TASKS))[0].note


async def test_a_concurrent_task_edit_made_while_away_is_told_at_start(
        relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    async with service_on(relay, tmp_path / "a", clock) as svc:
        await svc.chat.dispatch_tool("task_add", {"title": "base"})
        [base] = await svc.documents.history(DocumentKey.TASKS)
        clock.t += 10
        await svc.chat.dispatch_tool("task_update", {"id": 1, "note": "ours"})
        ours = (await svc.documents.history(DocumentKey.TASKS))[0]
    # While this device was away, another writer changed the base version, not ours.
    theirs_list = TaskList.from_json(base.content).update(1, now=int(clock.t) + 20, note="theirs")[0]
    theirs = tasks_event(TEST_KEY, theirs_list, int(clock.t) + 20, prev=base.event_id)
    await put(relay.url, theirs)
    again = service_on(relay, tmp_path / "a", clock)
    heard: list[Any] = []
    again.add_listener(heard.append)
    async with again:
        [told] = [e for e in heard if isinstance(e, DocumentChanged) and e.lost_local]
        assert (told.type, told.lost_event_id, told.winner_event_id) == ("tasks", ours.event_id, theirs.id)
        assert [t.note for t in again.documents.value(DocumentKey.TASKS).tasks] == ["theirs"]
        versions = {v.event_id: v for v in await again.documents.history(DocumentKey.TASKS)}
        assert LOST_NOTE in versions[ours.event_id].note and '"note": "ours"' in versions[ours.event_id].content


async def test_unsent_soul_and_task_versions_count_as_pending_like_memory(
        relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    async with service_on(relay, tmp_path / "a", clock) as svc:
        await relay.stop()  # no relay takes anything now: the outbox keeps it and retries
        soul_save = await svc.documents.save(DocumentKey.SOUL, SOUL_V1)
        assert not (await svc.chat.dispatch_tool("task_add", {"title": "while offline"})).is_error
        assert not soul_save.any_accepted
        pending = await svc.documents.pending_publishes()
        assert [(p.type, p.state) for p in pending] == [("soul", "pending"), ("tasks", "pending")]
        assert [p.event_id for p in await svc.documents.pending_publishes(DocumentKey.SOUL)] == [soul_save.event_id]
        assert await svc.documents.pending_publishes(DocumentKey.SHORT_TERM) == []
