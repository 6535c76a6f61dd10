"""The UI loop never blocks on the service's I/O while the user saves a memory with a long history behind it,
opens that history, and resumes a long chat; nor on the model helper while a prompt of long texts never counted
before is assembled, for a dry run and a turn. Checked two ways, in two passes over the same actions:

- structurally (tui_support.LoopIoWatch): no SQLite call, NIP-44 encryption/decryption, signature or model helper
  round trip (a token count, the model's context window) runs on the loop's thread at all — exact, whatever the
  machine's load;
- by time (tui_support.LoopLagProbe): no stretch of the loop's CPU time over a gross budget, which catches work
  held on the loop that is not I/O (parsing a thousand versions, say). The fine figures are bench/'s
  (memory_lag_bench.py): a time budget tight enough to be a benchmark fails on a loaded machine.
"""

from __future__ import annotations

import contextlib
import gc
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agent_support import memory_event
from llm_stub import LlmStub, Reply
from tui_support import (
    NOW,
    SIZE,
    TEST_KEY,
    LoopIoWatch,
    LoopLagProbe,
    make_app,
    make_config,
    save_followed,
    screen_text,
    started,
    wait_for,
)

from didactyl_tui.agent.conversations.store import ConversationStore
from didactyl_tui.agent.documents.history import DocumentHistory
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.llm import tokens
from didactyl_tui.config import SoulSection
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.screens.memory_history import MemoryHistoryScreen
from didactyl_tui.tui.widgets.message_entry import MessageEntry

# Gross: the loop held this long is a freeze a person sees. Above the noise of the 2-core test machine, where the
# longest stretch of a save, a history view or a resume measured 100-230 ms of the loop's CPU (before and after
# #22's suite changes alike): blocking I/O is caught exactly by the structural pass, this catches gross work.
BUDGET_S = 0.400
VERSIONS = 400  # the history the save and the history view have behind them
MESSAGES = 12  # the chat that is resumed


def seed(data: Path) -> str:
    """A long memory history and a long chat, written before the app starts; returns the chat's id."""
    data.mkdir(parents=True, exist_ok=True)
    history = DocumentHistory(data / "memory-history.sqlite3")
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


class Actions:
    """The user's actions, each measured by whatever ``measure`` opens around it."""

    def __init__(self, pilot: Any, app: Any, session: str) -> None:
        self.pilot, self.app, self.session = pilot, app, session
        self.main = app.main_screen

    async def save(self, text: str) -> None:
        pilot, app = self.pilot, self.app
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen, 10, "editor")
        editor.text_area.load_text(text)
        await pilot.pause()
        async with self.measure("save"):
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: "accepted by 1/1 relays" in screen_text(app), 10, "the save")
            await save_followed(pilot, "short_term")
        await editor.action_close()
        await wait_for(pilot, lambda: app.screen is self.main, 10, "back on the main screen")

    async def history(self, expected_rows: int) -> None:
        pilot, app, main = self.pilot, self.app, self.main
        async with self.measure("history"):
            main.documents.open_history("short_term")
            screen = await wait_for(pilot, lambda: isinstance(app.screen, MemoryHistoryScreen) and app.screen, 10,
                                    "the history")
            await wait_for(pilot, lambda: len(screen.rows) == expected_rows, 15,
                           lambda: f"the history rows ({len(screen.rows)})")
        screen.action_close()
        await wait_for(pilot, lambda: app.screen is main, 10, "back on the main screen")

    async def resume(self, session: str, entries: int) -> None:
        pilot, main = self.pilot, self.main
        async with self.measure("resume"):
            main.saved_chats.resume(session)
            await wait_for(pilot, lambda: len(main.conversation.query(MessageEntry)) == entries, 15,
                           lambda: f"the chat ({len(main.conversation.query(MessageEntry))} entries)")

    def measure(self, what: str) -> Any:
        raise NotImplementedError


class WatchedActions(Actions):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.calls: dict[str, list[str]] = {}

    @contextlib.asynccontextmanager
    async def measure(self, what: str) -> AsyncIterator[None]:
        with LoopIoWatch() as watch:
            yield
        self.calls[what] = watch.calls


class TimedActions(Actions):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.lags: dict[str, float] = {}

    @contextlib.asynccontextmanager
    async def measure(self, what: str) -> AsyncIterator[None]:
        probe = LoopLagProbe().start()
        try:
            yield
        finally:
            self.lags[what] = await probe.stop()


async def warm_up(actions: Actions, session: str) -> str:
    """Open the history and resume a first chat once: a screen's first showing parses its CSS and the first
    markdown sets Textual's renderer up, which is not I/O. Returns the first chat's id."""
    pilot, app, main = actions.pilot, actions.app, actions.main
    main.documents.open_history("long_term")
    warm = await wait_for(pilot, lambda: isinstance(app.screen, MemoryHistoryScreen) and app.screen, 10, "warm")
    # The screen's own workers (the app's may still be importing litellm: not this screen's business).
    await wait_for(pilot, lambda: not [w for w in app.workers if w.node is warm] and warm.rows is not None
                   and warm.query("#history-result"), 10, "warm rows")
    warm.action_close()
    await wait_for(pilot, lambda: app.screen is main, 10, "back on the main screen")
    first = next(s.id for s in await app.service.chat.sessions.list(include_empty=True) if s.id != session)
    main.saved_chats.resume(first)
    await wait_for(pilot, lambda: len(main.conversation.query(MessageEntry)) == 2, 15, "the first chat")
    await pilot.wait_for_scheduled_animations()
    return first


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
        watched = WatchedActions(pilot, app, session)
        first = await warm_up(watched, session)
        await watched.save("a new plan")
        await watched.history(VERSIONS + 1)
        await watched.resume(session, MESSAGES)

        timed = TimedActions(pilot, app, session)
        await timed.resume(first, 2)  # back to the short chat, so that the long one is resumed again below
        await timed.save("a newer plan")
        await timed.history(VERSIONS + 2)
        await timed.resume(session, MESSAGES)

    assert watched.calls == {"save": [], "history": [], "resume": []}
    assert all(lag < BUDGET_S for lag in timed.lags.values()), {k: f"{v * 1000:.0f} ms" for k, v in timed.lags.items()}


async def test_a_prompt_of_long_new_texts_is_counted_off_the_ui_loop(tmp_path: Path, stub: LlmStub) -> None:
    """A dry run and a turn whose soul sections and memory no count has seen (a token count is a round trip to the
    model helper, up to 2 s each), for a model whose context window nobody has asked (the status bar shows the prompt
    against it): the helper counts them all, never from the loop's thread."""
    salt = secrets.token_hex(8)  # texts and a model this test process has never counted or asked about
    persona = f"You are the keeper of the {salt} archive. " + "Answer briefly, cite the notes you used. " * 300
    rules = f"Rules of {salt}: " + "never invent a source; say when a note is missing; " * 300
    memory = f"Notes {salt}: " + "the river floods each spring, the mill keeps the records. " * 150
    config = make_config(llm_base_url=stub.base_url, model=f"openai/stub-{salt}", short_limit=50_000,
                         publish_profile=False)
    config.soul.sections = [SoulSection("persona", content=persona),
                            SoulSection("short_term_memory", tool="memory_short_term_read"),
                            SoulSection("rules", content=rules)]
    stub.script(Reply.text_reply("Noted."))
    app = make_app(tmp_path / "data", config)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await app.service.documents.save(DocumentKey.SHORT_TERM, memory)
        main = app.main_screen
        with LoopIoWatch() as watch:
            await pilot.press("f5")  # a dry run: the helper starts, the prompt is assembled and counted
            await wait_for(pilot, lambda: main.inspectors() and main.inspector.entries, 60, "the dry run")
            main.chat_input.focus()
            await pilot.press(*"what floods?", "enter")
            await wait_for(pilot, lambda: main.conversation.last_reply() == "Noted." and not main.streaming, 60,
                           "the reply")
        entries = list(main.inspector.entries)

    assert watch.calls == []
    # Counted, not estimated: the helper's tokenizer counted every long text (the test is not vacuous: with no
    # helper to ask there would be no round trip to catch, and the counts would be estimates).
    assert tokens.counter_backend() == "helper"
    for entry in entries:
        layers = {layer.section: layer for layer in entry.assembly.layers}
        for name, text in (("persona", persona), ("short_term_memory", memory), ("rules", rules)):
            assert text.strip() in layers[name].content, name
            want = tokens.count_here(layers[name].content)
            assert layers[name].tokens == want != tokens.approx_tokens(layers[name].content), name
    assert len(entries) == 2 and entries[1].assembly.user_message == "what floods?"
