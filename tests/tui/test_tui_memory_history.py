"""Pilot tests of issue 5 in the TUI, against a real AppService on a real relay: the memory history screen
(list, diff, roll back with confirmation and each relay's verdict) and the status bar's live pending count."""

from __future__ import annotations

from pathlib import Path

from agent_support import memory_event
from memory_support import held, put, text_of
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs
from tui_support import NOW, TEST_KEY, Clock, LabelledApp, click, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.service.app import AppService
from didactyl_tui.tui.screens.confirm import ConfirmScreen
from didactyl_tui.tui.screens.diff import DiffScreen
from didactyl_tui.tui.screens.memory_history import MemoryHistoryScreen
from didactyl_tui.tui.screens.merge import MergeScreen

SIZE = (130, 40)
ST = DocumentKey.SHORT_TERM


def app_on(relay: EmbeddedRelayUnderTest, data: Path, clock: Clock) -> LabelledApp:
    cfg = make_config(urls=[relay.url], publish_profile=False)
    cfg.relays.embedded.enabled = False
    env = make_env()
    service = AppService(cfg, data_dir=data, env=env, clock=clock, relay_client_options=fast_client_kwargs())
    return LabelledApp(cfg, data_dir=data, env=env, service=service)


def history_screen(app: LabelledApp) -> MemoryHistoryScreen | None:
    screen = app.screen
    return screen if isinstance(screen, MemoryHistoryScreen) else None


async def test_history_screen_lists_versions_diffs_two_and_rolls_back(tmp_path: Path,
                                                                      relay: EmbeddedRelayUnderTest) -> None:
    clock = Clock(NOW)
    app = app_on(relay, tmp_path / "d", clock)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        service = app.service
        one = await service.documents.save(ST, "first line\n")
        clock.t += 10
        two = await service.documents.save(ST, "first line\nsecond line\n")
        # The laptop edited version one (its base), not two: a concurrent edit.
        laptop = memory_event(TEST_KEY, "first line\nsecond line\nfrom the laptop\n", int(NOW) + 20,
                              prev=one.event_id)
        await put(relay.url, laptop)
        await wait_for(pilot, lambda: service.documents.snapshot(ST).event_id == laptop.id, 10, "the laptop's version")
        # A concurrent edit offers the merge view (once the history has judged it); keep theirs here.
        merge = await wait_for(pilot, lambda: isinstance(app.screen, MergeScreen) and app.screen, 10, "the merge view")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is not merge, 10, "the merge view closed")

        await click(pilot, "#short-term #history")
        screen = await wait_for(pilot, lambda: history_screen(app), 5, "the history screen")
        await wait_for(pilot, lambda: len(screen.rows) == 3, 5, "three versions")
        assert [(r.event_id, r.origin, r.current) for r in screen.rows] == [
            (laptop.id, "remote", True), (two.event_id, "local", False), (one.event_id, "local", False)]
        text = screen_text(app)
        assert "Short-term memory: history" in text
        assert laptop.id[:12] in text and "remote" in text and "11 chars" in text
        assert "lost to a newer version from another device" in text  # this device's edit lost to the laptop

        # Mark the oldest, select the middle one, diff: oldest → middle.
        screen.select(one.event_id)
        await pilot.press("m")
        assert screen.marked == one.event_id
        screen.select(two.event_id)
        await pilot.press("d")
        diff = await wait_for(pilot, lambda: app.screen if isinstance(app.screen, DiffScreen) else None, 5, "diff")
        assert (diff.old, diff.new) == ("first line\n", "first line\nsecond line\n")
        await wait_for(pilot, lambda: "+second line" in screen_text(app), 5, "the diff painted")
        await pilot.press("escape")
        await wait_for(pilot, lambda: history_screen(app), 5, "back to the history")

        # Roll back to the oldest: asked first; cancelling publishes nothing.
        screen.select(one.event_id)
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the confirmation")
        assert "Roll the short-term memory back to version" in screen_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: history_screen(app), 5, "back to the history")
        assert [ev.id for ev in await held(relay, key=TEST_KEY)] == [laptop.id]

        clock.t += 100
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5, "the confirmation")
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Rolled back to" in screen_text(app), 10, "the rollback's verdicts")
        text = screen_text(app)
        assert f"Rolled back to {one.event_id[:8]}: saved event" in text and "accepted by 1/1 relays" in text
        assert f"● {relay.url}  accepted" in text
        [on_relay] = await held(relay, key=TEST_KEY)
        assert text_of(on_relay, TEST_KEY) == "first line\n" and service.documents.snapshot(ST).event_id == on_relay.id
        await wait_for(pilot, lambda: len(screen.rows) == 4, 5, "the new version in the list")
        assert screen.rows[0].event_id == on_relay.id and screen.rows[0].current
        assert screen.rows[0].note == f"rollback to {one.event_id[:8]}"

        await pilot.press("escape")
        await wait_for(pilot, lambda: history_screen(app) is None, 5, "the main screen")
        assert app.main_screen.memory_pane("short_term").snapshot.content == "first line\n"


async def test_status_bar_counts_pending_publishes_live(tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    app = app_on(relay, tmp_path / "d", Clock(NOW))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        assert "0 publishes pending" in screen_text(app)
        await relay.stop()
        await wait_for(pilot, lambda: app.service.relays.states()[relay.url].value != "connected", 5, "offline")
        result = await app.service.documents.save(ST, "saved while the relay is down")
        assert not result.any_accepted
        await wait_for(pilot, lambda: main.status.pending_publishes == 1, 5, "the pending count")
        assert "1 publish pending" in screen_text(app)
        # The palette opens the history too; the unsent version is there already.
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"short-term memory history", "enter")
        screen = await wait_for(pilot, lambda: history_screen(app), 5, "the history screen")
        await wait_for(pilot, lambda: [r.event_id for r in screen.rows] == [result.event_id], 5, "the version")
        await pilot.press("escape")
        await relay.start()
        await wait_for(pilot, lambda: main.status.pending_publishes == 0, 10, "the edit to land")
        await wait_for(pilot, lambda: "0 publishes pending" in screen_text(app), 5, "the status bar")
        assert [ev.id for ev in await held(relay, key=TEST_KEY)] == [result.event_id]
