"""The UI loop never blocks on the service's I/O: a probe (tui_support.LoopLagProbe) watches the loop while
the user saves a memory with a long history behind it, opens that history, and resumes a long chat. Any SQLite
read, decryption or JSON parsing of the history done on the loop shows up as a stretch over 50 ms."""

from __future__ import annotations

import gc
from pathlib import Path

from agent_support import memory_event
from tui_support import (
    NOW,
    SIZE,
    TEST_KEY,
    LoopLagProbe,
    make_app,
    make_config,
    screen_text,
    started,
    wait_for,
)

from didactyl_tui.agent.conversations import ConversationStore
from didactyl_tui.agent.memory.history import MemoryHistory
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.screens.memory_history import MemoryHistoryScreen
from didactyl_tui.tui.widgets.message_entry import MessageEntry

BUDGET_S = 0.050
VERSIONS = 400  # the history the save and the history view have behind them
MESSAGES = 12  # the chat that is resumed


def seed(data: Path) -> str:
    """A long memory history and a long chat, written before the app starts; returns the chat's id."""
    data.mkdir(parents=True, exist_ok=True)
    history = MemoryHistory(data / "memory-history.sqlite3")
    try:
        for i in range(VERSIONS):
            ev = memory_event(TEST_KEY, f"version {i}: " + "notes " * 40, int(NOW) - 10_000 + i)
            history.record(ev, "remote")
    finally:
        history.close()
    chats = ConversationStore(data / "conversations.sqlite3")
    try:
        chats.append(chats.new_session("a first chat"), [{"role": "user", "content": "hello"},
                                                         {"role": "assistant", "content": "*hi*"}])
        session = chats.new_session("a long chat")
        turns = []
        for i in range(MESSAGES // 2):
            turns += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
        chats.append(session, turns)
    finally:
        chats.close()
    return session


async def test_the_ui_loop_never_blocks_on_a_save_a_history_view_or_a_resume(tmp_path: Path) -> None:
    data = tmp_path / "data"
    session = seed(data)
    # What the test process holds (litellm warmed for the suite, earlier tests) is frozen out of the garbage
    # collector, as run_app does for the app: a full collection of it is a pause of its own, not I/O.
    gc.collect()
    gc.freeze()
    app = make_app(data, make_config(publish_profile=False))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        probe = LoopLagProbe()

        # A save, through the editor.
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen, 10, "editor")
        editor.text_area.load_text("a new plan")
        await pilot.pause()
        probe.start()
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "accepted by 1/1 relays" in screen_text(app), 10, "the save")
        await pilot.pause(0.3)  # what follows a save: history record, outbox count
        save_lag = await probe.stop()
        editor.action_close()
        await wait_for(pilot, lambda: app.screen is main, 10, "back on the main screen")

        # The history view (opened once before: its first showing parses its CSS, which is not I/O).
        main.open_history("long_term")
        warm = await wait_for(pilot, lambda: isinstance(app.screen, MemoryHistoryScreen) and app.screen, 10, "warm")
        await wait_for(pilot, lambda: not warm.workers._workers and warm.query("#history-result"), 10, "warm rows")
        warm.action_close()
        await wait_for(pilot, lambda: app.screen is main, 10, "back on the main screen")
        probe.start()
        main.open_history("short_term")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, MemoryHistoryScreen) and app.screen, 10,
                                "the history")
        await wait_for(pilot, lambda: len(screen.rows) == VERSIONS + 1, 15,
                       lambda: f"the history rows ({len(screen.rows)})")
        history_lag = await probe.stop()
        screen.action_close()
        await wait_for(pilot, lambda: app.screen is main, 10, "back on the main screen")

        # A resume (after a first one: the first markdown on screen sets Textual's renderer up, which is not I/O).
        first = next(s.id for s in await app.service.list_sessions() if s.id != session)
        main.resume(first)
        await wait_for(pilot, lambda: len(main.conversation.query(MessageEntry)) == 2, 15, "the first chat")
        await pilot.pause(0.2)
        probe.start()
        main.resume(session)
        await wait_for(pilot, lambda: len(main.conversation.query(MessageEntry)) == MESSAGES, 15,
                       lambda: f"the chat ({len(main.conversation.query(MessageEntry))} entries)")
        resume_lag = await probe.stop()

    lags = {"save": save_lag, "history": history_lag, "resume": resume_lag}
    assert all(lag < BUDGET_S for lag in lags.values()), {k: f"{v * 1000:.0f} ms" for k, v in lags.items()}
