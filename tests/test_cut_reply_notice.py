"""A reply cut at a bound ([llm] max_reply_chars, turn_timeout_s) is said: a warning toast in the TUI, a
``warning:`` line on stderr and a ``cut`` field in ``chat --json`` (the text itself ends with its marker)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bad_inputs_support import NSEC, cli, cli_env, recording_app
from llm_stub import LlmStub, Reply
from tui_support import make_config, make_env, started, wait_for

# ~4,400 characters, past a 1,000-character bound; all different (litellm stops a stream repeating one chunk).
LONG = " ".join(f"word{n}" for n in range(500))


def llm_config(base_url: str) -> str:
    return (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{base_url}"\napi_key_env = "STUB_KEY"\n'
            "max_reply_chars = 1000\nmax_retries = 0\n"
            '[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n[agent]\npublish_profile = false\n')


async def test_the_cli_says_the_reply_was_cut(tmp_path: Path, warm_litellm: None) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply(LONG), Reply.text_reply(LONG))
        env = cli_env(tmp_path, llm_config(stub.base_url), DIDACTYL_NSEC=NSEC, STUB_KEY="sk-stub")
        plain = await asyncio.to_thread(cli, ["chat", "--message", "talk"], env)
        as_json = await asyncio.to_thread(cli, ["chat", "--message", "talk", "--json"], env)
    assert plain.code == 0, plain.stderr
    assert "[reply cut short:" in plain.stdout
    assert plain.stderr.splitlines()[-1] == (
        "warning: reply cut short: the reply passed 1,000 characters ([llm] max_reply_chars)")
    assert json.loads(as_json.stdout)["cut"] == "the reply passed 1,000 characters ([llm] max_reply_chars)"


async def test_the_tui_says_the_reply_was_cut(tmp_path: Path, warm_litellm: None) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply(LONG))
        config = make_config(llm_base_url=stub.base_url, publish_profile=False)
        config.llm.max_reply_chars = 1000
        app = recording_app(tmp_path, config, make_env(DIDACTYL_NSEC=NSEC))
        async with app.run_test(size=(130, 40), notifications=True) as pilot:
            await started(pilot)
            screen: Any = app.main_screen
            screen.chat_input.load_text("talk")
            await pilot.press("enter")
            toasts = await wait_for(pilot, lambda: app.notified_with("Reply cut short"), 30, "the cut notice")
    assert toasts == ["Reply cut short: The reply was cut short: the reply passed 1,000 characters "
                      "([llm] max_reply_chars)."]
