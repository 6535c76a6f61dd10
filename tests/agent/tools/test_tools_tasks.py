"""Task tools as the model calls them, persisted as kind 30078 d=tasks on real relays, rendered in the prompt;
and post_note, which asks before it publishes."""

from __future__ import annotations

import json
from pathlib import Path

from agent_support import AGENT_KEY, Clock, make_saves, make_store, offline_context, task_book
from relay_servers import RelayUnderTest, fast_client_kwargs

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.soul.assembly import assemble
from didactyl_tui.agent.soul.lint import lint_soul
from didactyl_tui.agent.soul.template import SoulTemplate, TemplateSection
from didactyl_tui.agent.tasks.task_list import TaskBook
from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.note_poster import NotePoster
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.signer import LocalSigner

TASKS = DocumentKey.TASKS

TEMPLATE = SoulTemplate((TemplateSection("soul", content="You are Ada."),
                         TemplateSection("tasks", tool="tasks_open_read")), "test")


def _recorded_book(saved: list[object]) -> TaskBook:
    """A book whose changes are recorded, not published (the list in use is the last one recorded)."""
    from didactyl_tui.agent.tasks.task_list import TaskList

    async def change(derive) -> None:
        saved.append(derive(saved[-1] if saved else TaskList()))

    return TaskBook(lambda: saved[-1] if saved else TaskList(), change, clock=Clock())


async def test_the_tools_change_the_list_on_the_relay_and_a_fresh_start_reads_it_back(
        any_relay: RelayUnderTest, tmp_path: Path) -> None:
    clock = Clock()
    registry = build_base_registry(tasks=True)
    ctx = offline_context(tmp_path, clock=clock)
    async with RelayPool([any_relay.url], **fast_client_kwargs()) as pool:
        store = make_store(AGENT_KEY, pool, clock=clock)
        await store.load()
        ctx.tasks = task_book(make_saves(store, pool, tmp_path / "documents", clock=clock), clock)
        for title in ("buy milk", "call Ana"):
            out = await registry.call("task_add", json.dumps({"title": title}), ctx)
            assert not out.is_error, out.content
        clock.t += 1  # same-second saves still move forward: the storage bumps created_at itself
        out = await registry.call("task_update", {"id": 1, "status": "in_progress", "note": "2 litres"}, ctx)
        assert json.loads(out.content)["updated"]["status"] == "in_progress"
        out = await registry.call("task_remove", {"id": 2}, ctx)
        assert json.loads(out.content)["removed"]["title"] == "call Ana"
        [stored] = await pool.query([TASKS.filter(AGENT_KEY.public_key_hex)], timeout=3)
        assert (await store.read(stored))[0] == ctx.tasks.current

    async with RelayPool([any_relay.url], **fast_client_kwargs()) as pool:
        fresh = make_store(AGENT_KEY, pool, clock=Clock(clock.t + 10))
        back = (await fresh.load([TASKS]))[TASKS].value
    assert back == ctx.tasks.current
    assert [(t.id, t.title, t.status, t.note) for t in back.tasks] == [(1, "buy milk", "in_progress", "2 litres")]


async def test_task_list_and_the_tasks_section_show_open_tasks_and_skip_when_none(tmp_path: Path) -> None:
    saved: list[object] = []
    registry = build_base_registry(tasks=True)
    ctx = offline_context(tmp_path)
    ctx.tasks = _recorded_book(saved)
    assert lint_soul(TEMPLATE, registry) == []

    def tasks_layer():
        asm = assemble(TEMPLATE, model="m", registry=registry, ctx=ctx, created_at=0.0)
        return next(layer for layer in asm.layers if layer.section == "tasks"), asm

    layer, _ = tasks_layer()
    assert layer.skipped and layer.skip_reason == "empty (skip_if_empty)"
    listed = json.loads((await registry.call("task_list", None, ctx)).content)
    assert listed == {"tasks": [], "note": "You have no tasks."}

    await registry.call("task_add", {"title": "file taxes", "note": "by Friday"}, ctx)
    await registry.call("task_add", {"title": "water plants"}, ctx)
    await registry.call("task_update", {"id": 2, "status": "done"}, ctx)
    layer, asm = tasks_layer()
    assert not layer.skipped and layer.content == "## Tasks (open)\n\n- [ ] #1 file taxes — by Friday"
    assert "## Tasks (open)" in asm.messages[0]["content"]
    open_only = json.loads((await registry.call("task_list", {}, ctx)).content)["tasks"]
    everything = json.loads((await registry.call("task_list", {"include_closed": True}, ctx)).content)["tasks"]
    assert [t["id"] for t in open_only] == [1] and [t["id"] for t in everything] == [1, 2]
    assert len(saved) == 3


async def test_the_model_gets_readable_errors_and_nothing_is_saved(tmp_path: Path) -> None:
    saved: list[object] = []
    registry = build_base_registry(tasks=True)
    ctx = offline_context(tmp_path)
    no_book = await registry.call("task_add", {"title": "x"}, ctx)
    assert no_book.is_error and no_book.content == "Error: the task list is not available here"
    ctx.tasks = _recorded_book(saved)
    for name, args, expected in (
        ("task_update", {"id": 4, "status": "done"}, "there is no task 4 (task ids: none)"),
        ("task_update", {"id": 1, "status": "finished"},
         'the parameter "status" of task_update must be one of "open", "in_progress", "done" or "cancelled"; '
         'it was the text "finished"'),
        ("task_add", {"title": ""}, "a task needs a title"),
        ("task_remove", {"id": "1"}, 'the parameter "id" of task_remove must be a whole number; it was the text "1"'),
    ):
        out = await registry.call(name, args, ctx)
        assert out.is_error and expected in out.content, out.content
    assert saved == []


# --- post_note (kind 1, after the user confirms) ------------------------------------------------


async def test_post_note_asks_first_publishes_on_yes_and_does_nothing_on_no(
        any_relay: RelayUnderTest, tmp_path: Path) -> None:
    asked: list[str] = []
    answers = [False, True]

    async def confirm(text: str) -> bool:
        asked.append(text)
        return answers.pop(0)

    registry = build_base_registry(notes=True)
    ctx = offline_context(tmp_path)
    async with RelayPool([any_relay.url], **fast_client_kwargs()) as pool:
        ctx.notes = NotePoster(LocalSigner(AGENT_KEY), lambda ev: pool.publish(ev, timeout=3), confirm, clock=Clock())
        declined = json.loads((await registry.call("post_note", {"text": "Hello, Nostr!"}, ctx)).content)
        assert declined == {"posted": False, "reason": "the user declined to publish this note"}
        assert await pool.query([{"authors": [AGENT_KEY.public_key_hex], "kinds": [1]}], timeout=3) == []
        posted = json.loads((await registry.call("post_note", {"text": " Hello, Nostr! "}, ctx)).content)
        assert posted["posted"] and posted["accepted_by"] == [any_relay.url]
        [note] = await pool.query([{"authors": [AGENT_KEY.public_key_hex], "kinds": [1]}], timeout=3)
    assert (note.id, note.content) == (posted["event_id"], "Hello, Nostr!")
    assert asked == ["Hello, Nostr!", "Hello, Nostr!"]


async def test_post_note_without_confirmation_when_allowed_and_its_limits(tmp_path: Path) -> None:
    published: list[Event] = []

    async def publish(ev: Event) -> object:
        published.append(ev)
        return None  # no outcome: nothing known to have accepted it

    registry = build_base_registry(notes=True)
    ctx = offline_context(tmp_path)
    assert (await registry.call("post_note", {"text": "x"}, ctx)).content == \
        "Error: posting notes is not available here"
    ctx.notes = NotePoster(LocalSigner(AGENT_KEY), publish, None, clock=Clock(), max_chars=10)
    out = json.loads((await registry.call("post_note", {"text": "gm"}, ctx)).content)
    assert out["posted"] and out["warning"] == "no relay accepted the note yet" and published[0].content == "gm"
    for text, reason in (("   ", "needs some text"), ("x" * 11, "at most 10 characters")):
        result = await registry.call("post_note", {"text": text}, ctx)
        assert result.is_error and reason in result.content
    assert len(published) == 1
    offered = [t["function"]["name"] for t in build_base_registry().openai_schemas()]
    assert "post_note" not in offered  # not offered until the service gives a poster
