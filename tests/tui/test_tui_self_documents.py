"""Pilot tests of the soul and the task list in the TUI, against a real AppService on a real relay: the tasks in
the memory tab (open first, status, note), live as the agent's tools or another writer change them; the soul and
the tasks edited in the memory editor (a soul the linter refuses names its section, publishes nothing, and the
text stays), their history with diff and rollback, and a concurrent edit from a second writer (a second service
on the same relay) shown with both texts kept."""

from __future__ import annotations

from pathlib import Path

from agent_support import soul_event, tasks_event
from memory_support import put
from relay_servers import EmbeddedRelayUnderTest
from self_documents_support import service_on, soul, stored
from tui_support import (
    NOW,
    TEST_KEY,
    Clock,
    LabelledApp,
    LoopIoWatch,
    click,
    make_app,
    make_config,
    make_env,
    save_followed,
    screen_text,
    started,
    wait_for,
)

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.lineage import base_of
from didactyl_tui.agent.soul.content import read_soul_text
from didactyl_tui.agent.tasks.task_list import TaskList
from didactyl_tui.nostr.kinds import SOUL
from didactyl_tui.tui.screens.confirm import ConfirmScreen
from didactyl_tui.tui.screens.diff import DiffScreen
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.screens.memory_history import MemoryHistoryScreen
from didactyl_tui.tui.screens.merge import MergeScreen

SIZE = (130, 44)



def app_on(relay: EmbeddedRelayUnderTest, data: Path, clock: Clock) -> LabelledApp:
    service = service_on(relay, data, clock)
    return LabelledApp(service.config, data_dir=data, env=make_env(), service=service)


async def souls_on(relay: EmbeddedRelayUnderTest) -> list[str]:
    return [ev.id for ev in await stored(relay, SOUL, "soul")]


def editor_on(app: LabelledApp) -> MemoryEditorScreen | None:
    """The editor once it is composed."""
    screen = app.screen
    return screen if isinstance(screen, MemoryEditorScreen) and screen.query("#editor-text") else None


def flat(app: LabelledApp) -> str:
    return " ".join(screen_text(app).split())


async def test_the_tasks_pane_shows_open_tasks_first_and_follows_the_tools_and_another_writer(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    clock = Clock(NOW)
    app = app_on(relay, tmp_path / "a", clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await wait_for(pilot, lambda: "(no tasks yet)" in screen_text(app), 5, "the empty tasks pane")
        service = app.service
        for args in ({"title": "buy milk"}, {"title": "fix the bike", "note": "rear tyre"},
                     {"id": 1, "status": "done"}, {"id": 2, "status": "in_progress"}):
            clock.t += 2
            outcome = await service.chat.dispatch_tool("task_update" if "id" in args else "task_add", args)
            assert not outcome.is_error, outcome.content
        # Both lines: until the layout pass gives the pane its second line, the screen shows its first only.
        two = ("#2 fix the bike · in progress — rear tyre", "#1 buy milk · done")

        def both_shown() -> str | None:
            text = screen_text(app)
            return text if all(line in text for line in two) else None

        text = await wait_for(pilot, both_shown, 5, "the tools' tasks")
        assert text.index(two[0]) < text.index(two[1])
        assert "Tasks (1 open)" in text
        # A second writer (another service on the same relay, as the CLI is) adds a task: shown live.
        async with service_on(relay, tmp_path / "b", clock) as other:
            clock.t += 5
            assert not (await other.chat.dispatch_tool("task_add", {"title": "from the other writer"})).is_error
            await wait_for(pilot, lambda: "#3 from the other writer · open" in screen_text(app), 10, "live")
        assert "Tasks (2 open)" in screen_text(app)


async def test_editing_the_soul_lints_first_then_history_diff_and_rollback(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    clock = Clock(NOW)
    app = app_on(relay, tmp_path / "a", clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        app.main_screen.action_edit_soul()
        editor = await wait_for(pilot, lambda: editor_on(app), 5, "the soul editor")
        assert "Editing soul" in screen_text(app) and '"format": "didactyl-soul/1"' in editor.text_area.text
        # A soul naming an unknown tool: refused before signing, naming the section; the text stays.
        bad = soul("One").replace("task_list", "weather_now")
        editor.text_area.load_text(bad)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "Not saved" in flat(app), 5, "the refusal")
        assert "section 'tasks'" in flat(app) and "weather_now" in flat(app)
        assert editor.text_area.text == bad and await souls_on(relay) == []
        # Good souls save and publish, each named in the history.
        for persona in ("One", "Two"):
            clock.t += 10
            editor.text_area.load_text(soul(persona))
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda p=persona: f"You are {p}." in app.service.soul.view().template.sections[0]
                           .content and "accepted by 1/1 relays" in flat(app), 10, f"soul {persona} saved")
        assert not editor.unsaved  # the editor holds the saved document (in its normal form)
        one, two = [v.event_id for v in (await app.service.documents.history(DocumentKey.SOUL))[::-1]]
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, MemoryEditorScreen), 5, "the editor closed")

        app.main_screen.action_history_soul()
        history = await wait_for(pilot, lambda: isinstance(app.screen, MemoryHistoryScreen) and app.screen, 5,
                                 "the soul history")
        await wait_for(pilot, lambda: len(history.rows) == 2, 5, "two versions")
        assert "Soul: history" in screen_text(app)
        assert [(r.event_id, r.current) for r in history.rows] == [(two, True), (one, False)]
        history.select(one)
        await pilot.press("d")
        diff = await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen, 5, "the diff")
        assert '"You are One."' in diff.old and '"You are Two."' in diff.new
        assert '-   "content": "You are One.",' in screen_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is history, 5, "back to the history")
        history.select(one)
        clock.t += 10
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the confirmation")
        assert "Roll the soul back to version" in screen_text(app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: f"Rolled back to {one[:8]}" in flat(app), 10, "the rollback")
        assert app.service.soul.view().template.sections[0].content == "You are One."
        await wait_for(pilot, lambda: len(history.rows) == 3 and history.rows[0].current, 5, "the new version")
        assert history.rows[0].note == f"rollback to {one[:8]}" and len(await souls_on(relay)) == 1


async def test_a_second_writer_while_editing_the_tasks_is_shown_with_both_texts(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    clock = Clock(NOW)
    app = app_on(relay, tmp_path / "a", clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert not (await app.service.chat.dispatch_tool("task_add", {"title": "shared task"})).is_error
        app.main_screen.action_edit_tasks()
        editor = await wait_for(pilot, lambda: editor_on(app), 5, "the tasks editor")
        ours = editor.text_area.text.replace('"note": ""', '"note": "our note"')
        editor.text_area.load_text(ours)
        async with service_on(relay, tmp_path / "b", clock) as other:
            clock.t += 5
            assert not (await other.chat.dispatch_tool("task_add", {"title": "their task"})).is_error
            await wait_for(pilot, lambda: "A newer version arrived while you were editing" in flat(app), 10,
                           "told of the other writer's version")
        assert editor.text_area.text == ours  # ours kept
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "Not saved: a newer version arrived" in flat(app), 5, "not overwritten")
        await click(pilot, "#view-diff")
        diff = await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen, 5, "the diff")
        assert "their task" in diff.old and "our note" in diff.new and "their task" not in diff.new
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is editor, 5, "back to the editor")
        clock.t += 5
        await click(pilot, "#overwrite")
        await wait_for(pilot, lambda: "accepted by 1/1 relays" in flat(app), 10, "ours saved over theirs")
        assert [t.note for t in app.service.documents.value(DocumentKey.TASKS).tasks] == ["our note"]
        versions = await app.service.documents.history(DocumentKey.TASKS)
        assert "their task" in versions[1].content  # theirs kept in the history
        assert base_of(versions[0].event) == versions[1].event_id  # ours now builds on theirs


async def test_a_concurrent_soul_edit_opens_the_merge_view_with_both_texts(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    clock = Clock(NOW)
    app = app_on(relay, tmp_path / "a", clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        service = app.service
        base = await service.documents.save(DocumentKey.SOUL, soul("Base"))
        clock.t += 10
        ours = await service.documents.save(DocumentKey.SOUL, soul("Ours"))
        # A second writer with the same key edited the base, not ours: a concurrent edit, newer than ours.
        async with service_on(relay, tmp_path / "b", clock) as other:
            theirs = soul_event(TEST_KEY, read_soul_text("t", soul("Theirs")), int(clock.t) + 10, prev=base.event_id)
            assert (await other.parts.runtime.pool.publish(theirs, timeout=3.0)).any_accepted
            merge = await wait_for(pilot, lambda: isinstance(app.screen, MergeScreen) and app.screen, 10,
                                   "the merge view")
        await wait_for(pilot, lambda: merge.theirs_text is not None, 10, "both versions loaded")
        await wait_for(pilot, lambda: '+ "content": "You are Theirs.",' in flat(app), 10, "the diff drawn")
        assert "You are Ours." in merge.ours_text and "You are Theirs." in merge.theirs_text
        text = flat(app)
        assert "Concurrent edits of the soul" in text and ours.event_id[:8] in text and theirs.id[:8] in text
        assert '- "content": "You are Ours.",' in text and '+ "content": "You are Theirs.",' in text
        # A JSON document merged key by key from the base: the persona line both changed is the one conflict.
        await wait_for(pilot, lambda: merge.draft is not None, 10, "the merged draft")
        assert merge.text_area.text.count("<<<<<<< yours") == 1
        assert '<<<<<<< yours\n   "content": "You are Ours.",\n=======\n   "content": "You are Theirs.",\n' \
            '>>>>>>> theirs\n' in merge.text_area.text
        await wait_for(pilot, lambda: "1 conflict to resolve" in flat(app), 5, "the count")
        assert service.soul.view().event_id == theirs.id
        clock.t += 20
        merge.text_area.load_text(soul("Ours and Theirs"))
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "Merged and saved" in flat(app), 10, "the merged save")
        assert service.soul.view().template.sections[0].content == "You are Ours and Theirs."
        [now] = await souls_on(relay)
        [stored] = [v for v in await service.documents.history(DocumentKey.SOUL) if v.event_id == now]
        assert base_of(stored.event) == theirs.id


async def test_no_sqlite_nip44_or_signature_on_the_ui_loop_for_the_soul_and_the_tasks(tmp_path: Path) -> None:
    """Saving the soul and the tasks in the editor, opening their history and taking another writer's task list
    live: none of it runs SQLite, NIP-44 or a signature on the UI loop's thread (exact, whatever the load)."""
    app = make_app(tmp_path / "d", make_config(publish_profile=False), clock=Clock(NOW))
    calls: dict[str, list[str]] = {}
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        for doc, edit in (("soul", lambda text: soul("Watched")),
                          ("tasks", lambda text: TaskList().add("watched", now=int(NOW))[0].to_text())):
            main.documents.open_editor(doc)
            editor = await wait_for(pilot, lambda: editor_on(app), 10, f"the {doc} editor")
            editor.text_area.load_text(edit(editor.text_area.text))
            await pilot.pause()
            with LoopIoWatch() as watch:
                await pilot.press("ctrl+s")
                await wait_for(pilot, lambda: "accepted by 1/1 relays" in flat(app), 10, f"the {doc} save")
                await save_followed(pilot, doc)
            calls[f"save {doc}"] = watch.calls
            await editor.action_close()
            await wait_for(pilot, lambda: app.screen is main, 10, "back on the main screen")
            with LoopIoWatch() as watch:
                main.documents.open_history(doc)
                history = await wait_for(pilot, lambda: isinstance(app.screen, MemoryHistoryScreen) and app.screen,
                                         10, f"the {doc} history")
                await wait_for(pilot, lambda h=history: len(h.rows) == 1, 10, f"the {doc} versions")
            calls[f"history {doc}"] = watch.calls
            history.action_close()
            await wait_for(pilot, lambda: app.screen is main, 10, "back on the main screen")
        # Another writer's newer task list arrives live (signed before watching: the other writer's work).
        theirs = tasks_event(TEST_KEY, TaskList().add("from elsewhere", now=int(NOW))[0], int(NOW) + 60,
                             prev=app.service.documents.snapshot(DocumentKey.TASKS).event_id)
        with LoopIoWatch() as watch:
            await put(app.service.relays.embedded_url, theirs)
            await wait_for(pilot, lambda: "#1 from elsewhere · open" in screen_text(app), 10, "their tasks, live")
            await pilot.wait_for_scheduled_animations()
        calls["live tasks"] = watch.calls
    assert calls == {key: [] for key in calls} and len(calls) == 5
