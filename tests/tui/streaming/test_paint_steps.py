"""tui/streaming/fast.py: while nobody types, a paint's steps (blocks mounted, a part handed over, the tail) are
held to one layout pass (a batch: no frame in between); while someone types they are not, so a key's echo can go
out between them. Real widgets in a small app with the real stylesheet."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App, ComposeResult
from tui_support import wait_for

from didactyl_tui.tui.app import DidactylApp
from didactyl_tui.tui.streaming import typing_clock
from didactyl_tui.tui.streaming.fast import FastBody
from didactyl_tui.tui.streaming.reply import ReplyPath
from didactyl_tui.tui.widgets.conversation import Conversation

TEXT = "\n\n".join(f"Paragraph {n} " + "word " * 30 if n % 3 else f"- item {n}\n- item {n}b" for n in range(24))


class ConversationApp(App[None]):
    CSS_PATH = DidactylApp.CSS_PATH

    def compose(self) -> ComposeResult:
        yield Conversation(id="conversation", reply_path=ReplyPath.FAST)


async def batch_counts_while_mounting(monkeypatch: Any, typing: bool) -> list[int]:
    """Stream TEXT; the app's batch depth as each paint starts its steps (``typing``: a key just before each
    delta)."""
    seen: list[int] = []
    original = FastBody._append_locked

    def spy(self: FastBody, text: str) -> Any:
        seen.append(self.host.app._batch_count)
        return original(self, text)

    monkeypatch.setattr(FastBody, "_append_locked", spy)
    monkeypatch.setattr(typing_clock, "_last_input", float("-inf"))  # no key yet in this process
    app = ConversationApp()
    async with app.run_test(size=(100, 30)) as pilot:
        entry = await app.query_one(Conversation).start_reply()
        for n in range(0, len(TEXT), 300):
            if typing:
                typing_clock.note_input()
            await entry.feed(TEXT[n:n + 300])
            await pilot.pause()
        await wait_for(pilot, lambda: entry.painted_text == TEXT, 30, "every delta painted")
        await entry.finish()
        assert "".join(entry.part_sources) == TEXT and len(entry.finished_parts()) >= 1
    return seen


@pytest.mark.parametrize("typing", [False, True], ids=["nobody-types", "typing"])
async def test_a_paints_steps_are_one_layout_pass_unless_someone_types(monkeypatch: Any, typing: bool) -> None:
    seen = await batch_counts_while_mounting(monkeypatch, typing)
    assert seen
    if typing:
        assert all(depth == 0 for depth in seen)  # frames go out between the steps
    else:
        assert all(depth >= 1 for depth in seen)  # held: the paint's changes land in one pass
