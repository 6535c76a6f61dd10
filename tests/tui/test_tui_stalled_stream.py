"""Pilot: a reply that stalls says so. After a few seconds with no word from the model the status bar counts the
silence and names the key that cancels; the next word clears it; Esc then cancels as it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply
from tui_support import SIZE, make_app, make_config, screen_text, started, wait_for

from didactyl_tui.tui.widgets.message_entry import MessageEntry

pytestmark = pytest.mark.usefixtures("warm_litellm")

STALL_S = 2.0  # [llm] stall_notice_s here (5 by default)


async def test_a_stalled_reply_says_how_long_it_waited_and_that_esc_cancels(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        # A word, a pause longer than the notice, a word, then a stall that only Esc ends.
        stub.script(Reply.text_reply("one two three", chunks=["one", " two", " three"],
                                     pauses={0: STALL_S + 4, 1: 120.0}))
        config = make_config(llm_base_url=stub.base_url)
        config.llm.timeout_s = 300.0  # the model's own silence limit is not what is tested here
        config.llm.stall_notice_s = STALL_S
        app = make_app(tmp_path, config)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            main.chat_input.focus()
            await pilot.press(*"go", "enter")
            await wait_for(pilot, lambda: "one" in (main.conversation.last_reply() or ""), 30, "the first word")
            status, reply = main.status, main.conversation.query(MessageEntry)[-1]
            await wait_for(pilot, lambda: "no word from the model for" in status.activity, 30, "the notice")
            assert status.activity.startswith("writing… no word from the model for ")
            # Said whole on the reply's frame too (the status bar may be cut on a narrow terminal).
            notice = str(reply.border_subtitle)
            assert notice.startswith("no word from the model for ") and notice.endswith(" s · Esc cancels"), notice
            assert int(notice.split(" for ")[1].split(" s")[0]) >= STALL_S
            shown = re.compile(r"no word from the model for \d+ s · Esc cancels")  # it counts on as we look
            await wait_for(pilot, lambda: shown.search(screen_text(app)), 10, "the notice on screen")
            # The next word ends the silence: the notice goes.
            await wait_for(pilot, lambda: "two" in (main.conversation.last_reply() or ""), 30, "the second word")
            assert status.activity == "writing…" and not reply.border_subtitle
            await wait_for(pilot, lambda: "no word from the model for" in status.activity, 30, "the notice again")
            await pilot.press("escape")
            await wait_for(pilot, lambda: not main.streaming, 10, "the cancel")
            assert status.activity == "" and main.conversation.last_reply().endswith("*(cancelled)*")


async def test_a_reply_that_stalled_and_then_finished_ends_as_any_other(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("one two", chunks=["one", " two"], pauses={0: STALL_S + 2}))
        config = make_config(llm_base_url=stub.base_url)
        config.llm.timeout_s, config.llm.stall_notice_s = 300.0, STALL_S
        app = make_app(tmp_path, config)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            main.chat_input.focus()
            await pilot.press(*"go", "enter")
            await wait_for(pilot, lambda: "no word from the model for" in main.status.activity, 30, "the notice")
            await wait_for(pilot, lambda: not main.streaming, 30, "the end of the turn")
            reply = main.conversation.query(MessageEntry)[-1]
            assert reply.text == "one two" and not reply.border_subtitle and main.status.activity == ""
            # The model's own count of the prompt, as after any turn (not our estimate).
            assert main.status.prompt_tokens == 11 and main.status.tokens_estimated is False
