"""The model's helper process starts when a model is first needed, not with the app: at the first key typed in the
message box (the status bar says it loads), and a message sent meanwhile waits for it. Real app, the stub model
over HTTP, a helper process of this test's own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply
from tui_support import make_app, make_config, screen_text, started, wait_for

from didactyl_tui.agent.llm import worker_client

SIZE = (130, 40)


@pytest.fixture
def own_helper(monkeypatch: pytest.MonkeyPatch) -> Iterator[worker_client.LlmWorker]:
    """This test's helper, in place of the one the suite's other tests share (already running)."""
    helper = worker_client.LlmWorker()
    monkeypatch.setattr(worker_client, "_worker", helper)
    yield helper
    proc = helper._proc
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()
        proc.wait(10)


async def test_the_helper_starts_at_the_first_key_and_the_status_bar_says_it_loads(
        tmp_path: Path, stub: LlmStub, own_helper: worker_client.LlmWorker) -> None:
    stub.script(Reply.text_reply("Hello from the model."))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        assert not own_helper.running  # at rest: no helper, no litellm
        loading: list[bool] = []
        main.watch(main.status, "model_loading", lambda value: loading.append(value), init=False)
        main.chat_input.focus()
        await pilot.press("h")
        await wait_for(pilot, lambda: own_helper.running, 10, "the helper to start at the first key")
        await wait_for(pilot, lambda: loading == [True, False], 120, lambda: f"the status bar's loading: {loading}")
        assert own_helper.ready.is_set() and "loading…" not in screen_text(app)
        await pilot.press(*"ello", "enter")
        await wait_for(pilot, lambda: main.conversation.last_reply() == "Hello from the model.", 30, "the reply")


async def test_a_message_sent_while_the_helper_loads_is_answered_once_it_is_ready(
        tmp_path: Path, stub: LlmStub, own_helper: worker_client.LlmWorker) -> None:
    stub.script(Reply.text_reply("Answered."))
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        main.chat_input.focus()
        await pilot.press(*"hi", "enter")  # at once: the helper is still starting
        await wait_for(pilot, lambda: main.conversation.last_reply() == "Answered.", 120, "the reply")
        assert len(stub.requests) == 1
        await asyncio.to_thread(own_helper.settled.wait, 10)
