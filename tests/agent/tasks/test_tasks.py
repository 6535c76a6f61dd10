"""The task list model: changes, bounds, the prompt rendering and the stored form (kind 30078 d=tasks)."""

from __future__ import annotations

import json

import pytest
from agent_support import AGENT_KEY, NOW, OTHER_KEY, make_store, tasks_event

from didactyl_tui.agent.documents.codec import DocumentError
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.tasks.task_list import (
    MAX_NOTE_CHARS,
    MAX_TASKS,
    MAX_TASKS_BYTES,
    MAX_TITLE_CHARS,
    TASKS_FORMAT,
    TaskBook,
    TaskError,
    TaskList,
)
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.filters import matches
from didactyl_tui.nostr.pool import RelayPool

TASKS = DocumentKey.TASKS


def _three() -> TaskList:
    tl = TaskList()
    for title in ("buy milk", "call Ana", "file taxes"):
        tl, _ = tl.add(title, now=NOW)
    return tl


def test_add_update_remove_return_new_lists_and_ids_are_never_reused() -> None:
    empty = TaskList()
    tl, task = empty.add("  buy\n milk  ", note="2 litres", now=NOW)
    assert empty.tasks == () and (task.id, task.title, task.status, task.note) == (1, "buy milk", "open", "2 litres")
    tl, _ = tl.add("call Ana", now=NOW)
    tl2, done = tl.update(1, status="done", now=NOW + 5)
    assert (done.status, done.updated_at, done.created_at) == ("done", NOW + 5, NOW)
    assert tl.get(1).status == "open"  # the old list is untouched
    tl3, removed = tl2.remove(2)
    assert removed.title == "call Ana" and [t.id for t in tl3.tasks] == [1]
    _, again = tl3.add("walk", now=NOW)
    assert again.id == 3


def test_bad_changes_are_refused_with_a_readable_reason() -> None:
    tl = _three()
    cases = [
        (lambda: tl.add("   ", now=NOW), "needs a title"),
        (lambda: tl.add("x" * (MAX_TITLE_CHARS + 1), now=NOW), f"at most {MAX_TITLE_CHARS} characters"),
        (lambda: tl.add("x", note="n" * (MAX_NOTE_CHARS + 1), now=NOW), f"at most {MAX_NOTE_CHARS}"),
        (lambda: tl.update(9, status="done", now=NOW), r"there is no task 9 \(task ids: 1, 2, 3\)"),
        (lambda: tl.update(1, status="finished", now=NOW), "status must be one of open, in_progress, done"),
        (lambda: tl.update(1, now=NOW), "nothing to change in task 1"),
        (lambda: tl.remove(0), "there is no task 0"),
    ]
    for change, reason in cases:
        with pytest.raises(TaskError, match=reason) as caught:
            change()
        assert isinstance(caught.value, AgentError)


def test_the_list_is_bounded_in_count_and_in_bytes() -> None:
    tl = TaskList()
    for i in range(MAX_TASKS):
        tl, _ = tl.add(f"task {i}", now=NOW)
    with pytest.raises(TaskError, match=f"full \\({MAX_TASKS} tasks\\)"):
        tl.add("one more", now=NOW)
    big = TaskList()
    with pytest.raises(TaskError, match="over its 32,000-byte limit"):
        for i in range(MAX_TASKS):
            big, _ = big.add(f"task {i}", note="é" * MAX_NOTE_CHARS, now=NOW)
            big.to_json()
    assert len(big.tasks) < MAX_TASKS


def test_render_open_shows_open_and_in_progress_tasks_only_and_is_empty_without_them() -> None:
    tl = _three()
    tl, _ = tl.update(1, status="in_progress", note="at the\nshop", now=NOW)
    tl, _ = tl.update(3, status="done", now=NOW)
    assert tl.render_open() == "## Tasks (open)\n\n- [ ] #1 buy milk (in progress) — at the shop\n- [ ] #2 call Ana"
    tl, _ = tl.update(2, status="cancelled", now=NOW)
    tl, _ = tl.update(1, status="done", now=NOW)
    assert tl.render_open() == "" and TaskList().render_open() == ""


def test_json_round_trips_and_refuses_what_is_broken() -> None:
    tl, _ = _three().update(2, status="in_progress", note="evening", now=NOW + 1)
    assert TaskList.from_json(tl.to_json()) == tl
    good = json.loads(tl.to_json())
    assert good["format"] == TASKS_FORMAT and good["next_id"] == 4
    bad_docs = [
        ("nope", "not valid JSON"),
        (json.dumps({**good, "format": "x"}), "not a didactyl-tasks/1"),
        (json.dumps({**good, "tasks": {}}), "list of at most"),
        (json.dumps({**good, "next_id": 2}), "bad next_id"),
        (json.dumps({**good, "next_id": True}), "bad next_id"),
        (json.dumps({**good, "tasks": [*good["tasks"], good["tasks"][0]]}), "repeats a task id"),
        (json.dumps({**good, "tasks": [{**good["tasks"][0], "status": "lost"}]}), "status must be"),
        (json.dumps({**good, "tasks": [{**good["tasks"][0], "id": -1}]}), "non-negative integers"),
        (json.dumps({**good, "tasks": [{"id": 1}]}), "has no 'title'"),
        (json.dumps({**good, "tasks": ["x"]}), "is not an object"),
        ("[" * 3000 + "]" * 3000, "not valid JSON"),
        (" " * (MAX_TASKS_BYTES + 1), "over its"),
    ]
    for text, reason in bad_docs:
        with pytest.raises(TaskError, match=reason):
            TaskList.from_json(text)


async def test_the_stored_event_is_kind_30078_d_tasks_encrypted_to_self() -> None:
    tl = _three()
    store = make_store(AGENT_KEY, RelayPool([]))
    ev = await store.events.build(TASKS, tl, NOW, None)
    assert (ev.kind, ev.d_tag, ev.first_tag("app")) == (30078, "tasks", "didactyl") and ev.is_valid()
    assert "milk" not in ev.content
    assert matches(TASKS.filter(AGENT_KEY.public_key_hex), ev)
    assert (await store.read(ev))[0] == tl
    foreign = tasks_event(OTHER_KEY, tl, NOW)
    memory = sign_event(AGENT_KEY, kind=30078, content=ev.content, created_at=NOW, tags=[["d", "short_term_memory"]])
    forged = Event.from_dict({**ev.to_dict(), "sig": "33" * 64})
    conv = nip44.get_conversation_key(AGENT_KEY.secret_hex(), OTHER_KEY.public_key_hex)
    to_other = sign_event(AGENT_KEY, kind=30078, content=nip44.encrypt(tl.to_json(), conv), created_at=NOW,
                          tags=[["d", "tasks"]])
    not_a_list = tasks_event(AGENT_KEY, tl, NOW, content='{"format": "something else"}')
    assert (await store.read(memory))[0] != tl  # read as the short-term memory it claims to be, never as tasks
    for bad, reason in ((foreign, "not a version"), (forged, "not a version"), (to_other, "does not decrypt"),
                        (not_a_list, "not a didactyl-tasks/1 document")):
        with pytest.raises(DocumentError, match=reason):
            await store.read(bad)


async def test_a_failed_save_leaves_the_book_unchanged_and_a_good_one_becomes_current() -> None:
    saved: list[TaskList] = []
    fail = [True]

    async def change(derive) -> None:
        new = derive(saved[-1] if saved else TaskList())
        if fail[0]:
            raise TaskError("no relay is reachable")
        saved.append(new)

    book = TaskBook(lambda: saved[-1] if saved else TaskList(), change, clock=lambda: NOW)
    assert book.current == TaskList()
    with pytest.raises(TaskError, match="no relay"):
        await book.add("buy milk")
    assert book.current == TaskList() and saved == []
    fail[0] = False
    task = await book.add("buy milk")
    assert book.current.tasks == (task,) and saved[-1] == book.current
    with pytest.raises(TaskError, match="there is no task 7"):
        await book.update(7, status="done")
    assert len(saved) == 1  # a refused change is never saved


def test_the_editable_form_is_the_same_json_one_task_a_line_and_hand_edits_are_dated() -> None:
    tl, _ = TaskList().add("buy milk", now=10)
    tl, _ = tl.add('say "hi"', note="twice", now=20)
    text = tl.to_text()
    assert text.splitlines()[1].startswith(' {"id": 1, "title": "buy milk"')
    assert len(text.splitlines()) == 4 and TaskList.from_json(text) == tl
    assert TaskList.from_json(TaskList().to_text()) == TaskList()
    edited = TaskList.from_json(text.replace('"status": "open", "note": "twice"', '"status": "done", "note": "twice"'))
    dated = edited.touched(tl, now=99)
    assert [(t.status, t.updated_at, t.created_at) for t in dated.tasks] == [("open", 10, 10), ("done", 99, 20)]
