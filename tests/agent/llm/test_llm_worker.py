"""The model client's helper process (agent.llm.worker): same chunks as litellm in this process, cancelled calls
close their HTTP stream, a dead helper is one readable error and the next call starts a new one, and a broken
helper cannot make this process buffer without bound. Real litellm in a real child process, against the stub."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from llm_stub import LlmStub, Reply, ToolCall

from didactyl_tui.agent.llm import worker_client as llm_worker_client
from didactyl_tui.agent.llm.client import stream_chat
from didactyl_tui.agent.llm.errors import LlmError
from didactyl_tui.agent.llm.types import LlmSettings
from didactyl_tui.agent.llm.worker_wire import chunks as wire_chunks
from didactyl_tui.agent.llm.worker_wire import settings_data, settings_from_data
from didactyl_tui.config import LlmConfig

TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look up.",
                                         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}


def settings_for(stub: LlmStub, **kw: Any) -> LlmSettings:
    return LlmSettings(**{"model": "openai/stub-model", "api_base": stub.base_url, "api_key": "sk-worker-test",
                          "timeout_s": 10.0, "max_retries": 0, **kw})


@pytest.fixture
def started_as_in_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """Helpers started here run ``python -m didactyl_tui.agent.llm.worker`` and import litellm themselves, as the
    app's do (not forked from the suite's template, tests/model_helper_template.py)."""
    monkeypatch.delenv(llm_worker_client.TEST_HELPER_ENV, raising=False)


async def collect(settings: LlmSettings, tools: list[dict] | None = None) -> tuple[str, list[Any], list[Any]]:
    text, calls, ends = [], [], []
    async for chunk in stream_chat(settings, [{"role": "user", "content": "hi"}], tools):
        text.append(chunk.text)
        calls.extend(chunk.tool_calls)
        ends.append((chunk.finish_reason, chunk.usage))
    return "".join(text), calls, [e for e in ends if e != (None, None)]


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_the_helper_and_this_process_give_the_same_reply(stub: LlmStub) -> None:
    reply = Reply.tools(ToolCall("lookup", '{"q": "tea in Oslo"}', id="call_9"), text="Looking it up.", usage=(21, 4))
    stub.script(reply, reply)
    helper = await collect(settings_for(stub), [TOOL])
    here = await collect(settings_for(stub, worker_process=False), [TOOL])
    assert helper[0] == here[0] == "Looking it up."
    args = ["".join(d.arguments for d in calls) for calls in (helper[1], here[1])]
    assert args[0] == args[1] == '{"q": "tea in Oslo"}'
    assert [d.id for d in helper[1] if d.id] == [d.id for d in here[1] if d.id] == ["call_9"]
    assert [f for f, _ in helper[2] if f] == [f for f, _ in here[2] if f] == ["tool_calls"]
    usage = [u for _, u in helper[2] if u is not None][-1]
    assert (usage.prompt_tokens, usage.completion_tokens) == (21, 4)
    assert stub.requests[0].body["tools"] == stub.requests[1].body["tools"] == [TOOL]


async def test_the_setting_comes_from_config_and_defaults_on() -> None:
    assert LlmSettings(model="x").worker_process is True
    assert LlmSettings.from_config(LlmConfig(model="x", worker_process=False), {}).worker_process is False


async def test_a_call_left_early_closes_its_stream_and_the_helper_goes_on(stub: LlmStub) -> None:
    stub.script(Reply.endless("word ", 100_000, chunk_delay_s=0.005), Reply.text_reply("still here"))
    helper = llm_worker_client.worker()
    seen = 0
    async for chunk in stream_chat(settings_for(stub), [{"role": "user", "content": "go"}]):
        seen += len(chunk.text)
        if seen > 50:
            break
    await wait_for(lambda: stub.open_streams == 0)  # the helper hung up: the server stopped sending
    assert not helper._calls
    assert (await collect(settings_for(stub)))[0] == "still here"


async def test_a_helper_that_dies_is_one_readable_error_and_the_next_call_starts_another(stub: LlmStub) -> None:
    stub.script(Reply.endless("word ", 100_000, chunk_delay_s=0.005), Reply.text_reply("a new helper"))
    helper = llm_worker_client.worker()
    with pytest.raises(LlmError) as info:
        async for chunk in stream_chat(settings_for(stub), [{"role": "user", "content": "go"}]):
            if chunk.text and helper._proc is not None:
                os.kill(helper._proc.pid, signal.SIGKILL)
    assert info.value.kind == "connection" and "helper process stopped" in info.value.message
    assert "\n" not in info.value.message and "Traceback" not in info.value.message
    assert (await collect(settings_for(stub)))[0] == "a new helper"


async def test_errors_keep_their_kind_and_retry_after_across_the_pipe(stub: LlmStub) -> None:
    stub.script(Reply.rate_limited(7))
    with pytest.raises(LlmError) as info:
        await collect(settings_for(stub, max_retry_wait_s=1.0))
    assert info.value.kind == "rate_limit" and info.value.retry_after == 7 and info.value.status == 429


async def test_an_over_long_line_from_the_helper_stops_it_instead_of_buffering(stub: LlmStub,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # One chunk of 200 kB: past a 64 kB bound the helper counts as broken (the real bound is 64 MiB).
    monkeypatch.setattr(llm_worker_client, "MAX_LINE_BYTES", 64 * 1024)
    stub.script(Reply.text_reply("x" * 200_000, chunks=["x" * 200_000]))
    with pytest.raises(LlmError) as info:
        await collect(settings_for(stub))
    assert info.value.kind == "connection"
    monkeypatch.undo()
    stub.script(Reply.text_reply("fine again"))
    assert (await collect(settings_for(stub)))[0] == "fine again"


async def test_the_helper_sees_the_environment_as_it_is_now(stub: LlmStub, monkeypatch: pytest.MonkeyPatch) -> None:
    # The helper started long before this test; a key exported since reaches litellm there.
    stub.script(Reply.text_reply("keyed"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    assert (await collect(settings_for(stub, api_key=None)))[0] == "keyed"
    assert stub.requests[-1].headers["Authorization"] == "Bearer sk-from-the-environment"


def test_settings_cross_the_pipe_whole() -> None:
    settings = LlmSettings(model="openai/m", api_base="http://127.0.0.1:9/v1", api_key="sk-x", max_tokens=5)
    data = settings_data(settings)
    assert settings_from_data(dict(data)) == settings
    assert dataclasses.asdict(settings.limits) == data["limits"]


async def test_a_helper_that_cannot_start_says_why_in_one_line(stub: LlmStub, monkeypatch: pytest.MonkeyPatch,
                                                                started_as_in_the_app: None) -> None:
    # A broken install, say: the helper writes its last words to stderr and exits before answering (the escape
    # sequence in them never reaches the terminal).
    monkeypatch.setattr(llm_worker_client, "HELPER_COMMAND", [
        sys.executable, "-c",
        "import sys; sys.stderr.write('Traceback...\\nImportError: no module \\x1b[31mlitellm\\n'); sys.exit(1)"])
    helper = llm_worker_client.LlmWorker()  # not the app's shared one
    with pytest.raises(LlmError) as info:
        async for _ in helper.stream(settings_for(stub), [{"role": "user", "content": "hi"}], None):
            pass
    assert info.value.kind == "connection"
    assert info.value.message == ("The model's helper process stopped (ImportError: no module litellm); "
                                  "try again.")
    assert stub.requests == []


async def test_a_started_helper_imports_litellm_before_any_call(started_as_in_the_app: None) -> None:
    # The app starts its helper after the first frame (when a model is configured): the first turn must not
    # pay litellm's ~8 s import. A fresh helper says when the import is done, with no call made.
    helper = llm_worker_client.LlmWorker()
    helper.start()
    try:
        assert await asyncio.to_thread(helper.ready.wait, 120), "the helper never finished importing litellm"
    finally:
        assert helper._proc is not None and helper._proc.stdin is not None
        helper._proc.stdin.close()  # it exits at once
        await asyncio.to_thread(helper._proc.wait, 10)


def test_an_error_of_a_kind_this_app_does_not_know_is_still_one_line() -> None:
    batch = [{"id": 1, "c": ["partial", None, None, None]},
             {"id": 1, "error": {"message": "The model call failed: OddError", "kind": "mystery"}}]
    chunks = wire_chunks(batch)
    assert next(chunks).text == "partial"  # what came before the error is kept
    with pytest.raises(LlmError) as info:
        next(chunks)
    assert info.value.kind == "server" and info.value.message == "The model call failed: OddError"


# --- counts and the model table: asked of the helper, so the app loads neither litellm nor a tokenizer ---------


def close_helper(helper: llm_worker_client.LlmWorker) -> None:
    assert helper._proc is not None and helper._proc.stdin is not None
    helper._proc.stdin.close()  # it exits at once
    helper._proc.wait(10)


async def test_counts_and_the_context_window_come_from_the_helper() -> None:
    from didactyl_tui.agent.llm import tokens

    helper = llm_worker_client.LlmWorker()
    with pytest.raises(LlmError):  # not started: nothing to ask
        await asyncio.to_thread(helper.count_tokens, "hello world")
    assert await asyncio.to_thread(helper.context_window, "gpt-4o-mini") is None
    helper.start()
    try:
        assert await asyncio.to_thread(helper.settled.wait, 120) and helper.ready.is_set()
        text = "The agent remembers what matters. " * 50
        # The same tokenizer as here; a batch is one round trip, its counts in order.
        assert await asyncio.to_thread(helper.count_tokens, text) == tokens.count_here(text) > 300
        assert await asyncio.to_thread(helper.count_texts, [text, "", "hello world"]) == [
            tokens.count_here(text), 0, tokens.count_here("hello world")]
        assert helper.known_context_window("gpt-4o-mini") is None  # not asked yet: a view reads no number
        assert await asyncio.to_thread(helper.context_window, "gpt-4o-mini") == 128_000  # litellm's table, there
        assert helper.known_context_window("gpt-4o-mini") == 128_000  # kept: read without a wait
        assert await asyncio.to_thread(helper.context_window, "openai/no-such-model") is None
    finally:
        await asyncio.to_thread(close_helper, helper)


async def test_a_blocking_request_on_an_event_loops_thread_is_refused_at_once() -> None:
    """A count or the model table asked on a loop's thread would freeze it for up to ASK_TIMEOUT_S: refused, so the
    caller falls back to an estimate (or to no window), and nothing is sent."""
    helper = llm_worker_client.LlmWorker()
    helper.start()
    try:
        assert await asyncio.to_thread(helper.settled.wait, 120) and helper.ready.is_set()
        with pytest.raises(LlmError, match="worker thread"):
            helper.count_texts(["hello world"])  # here, on the test's event loop
        assert helper.context_window("gpt-4o-mini") is None  # refused too: no number, and none kept
        assert helper.known_context_window("gpt-4o-mini") is None
        assert await asyncio.to_thread(helper.count_texts, ["hello world"]) == [2]  # the same from a thread
    finally:
        await asyncio.to_thread(close_helper, helper)


async def test_a_helper_whose_litellm_import_fails_is_settled_not_ready(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                                       started_as_in_the_app: None) -> None:
    # A broken litellm: a prompt must not wait for it (a turn then fails with one line, as before).
    (tmp_path / "litellm.py").write_text("raise ImportError('a broken litellm')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    helper = llm_worker_client.LlmWorker()
    helper.start()
    try:
        assert await asyncio.to_thread(helper.settled.wait, 60), "never settled"
        assert not helper.ready.is_set() and helper.running
        assert await asyncio.to_thread(helper.context_window, "gpt-4o-mini") is None
        assert await asyncio.to_thread(helper.count_tokens, "hello world") > 0  # counting needs no litellm
    finally:
        await asyncio.to_thread(close_helper, helper)


def test_with_a_helper_this_process_never_imports_litellm_or_a_tokenizer() -> None:
    script = """
import json, sys
from didactyl_tui.agent.llm import client as llm, tokens
from didactyl_tui.agent.llm.worker_client import worker
from didactyl_tui.service.chat import preload_llm
assert preload_llm(worker=True) is None and not worker().running  # nothing starts until a model is needed
llm.start_worker()
assert worker().settled.wait(120)
print(json.dumps({"count": llm.count_tokens("gpt-4o-mini", "hello world"), "backend": tokens.counter_backend(),
                  "window": llm.context_window("gpt-4o-mini"),
                  "loaded": sorted(m for m in ("litellm", "tiktoken", "openai") if m in sys.modules)}))
"""
    import json

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "count": 2, "backend": "helper", "window": 128_000, "loaded": []}


# --- started when needed, stopped when unused ([llm] helper_idle_exit_s) ---------------------------------------


async def test_an_unused_helper_stops_and_the_next_call_starts_another(stub: LlmStub) -> None:
    stub.script(Reply.text_reply("first"), Reply.text_reply("second"))
    helper = llm_worker_client.LlmWorker()  # not the app's shared one
    settings = settings_for(stub, helper_idle_exit_s=0.5)
    try:
        got = [c.text async for c in helper.stream(settings, [{"role": "user", "content": "hi"}], None)]
        assert "".join(got) == "first"
        proc = helper._proc
        assert proc is not None
        await asyncio.to_thread(proc.wait, 30)  # it exits by itself once unused for half a second
        assert not helper.running and not helper.ready.is_set()
        got = [c.text async for c in helper.stream(settings, [{"role": "user", "content": "hi"}], None)]
        assert "".join(got) == "second" and helper._proc is not None and helper._proc is not proc
    finally:
        if helper.running:
            await asyncio.to_thread(close_helper, helper)


async def test_a_helper_in_use_is_not_stopped_however_long_the_call(stub: LlmStub) -> None:
    # A reply that streams for longer than the idle time: the helper serving it stays until it ends.
    stub.script(Reply.endless("word ", 60, chunk_delay_s=0.05))
    helper = llm_worker_client.LlmWorker()
    settings = settings_for(stub, helper_idle_exit_s=0.2)
    try:
        words = 0
        async for chunk in helper.stream(settings, [{"role": "user", "content": "go"}], None):
            words += chunk.text.count("word")
        assert words == 60
    finally:
        if helper.running:
            await asyncio.to_thread(close_helper, helper)


async def test_without_an_idle_time_a_started_helper_stays(stub: LlmStub) -> None:
    stub.script(Reply.text_reply("kept"))
    helper = llm_worker_client.LlmWorker()
    try:
        settings = settings_for(stub, helper_idle_exit_s=0)
        async for _ in helper.stream(settings, [{"role": "user", "content": "x"}], None):
            pass
        proc = helper._proc
        assert proc is not None
        with pytest.raises(subprocess.TimeoutExpired):
            await asyncio.to_thread(proc.wait, 1.5)  # long past a short idle time: still there
        assert helper.running
    finally:
        await asyncio.to_thread(close_helper, helper)


def test_a_service_starts_no_helper_until_a_model_is_needed(tmp_path: Any) -> None:
    # In a process of its own: the helper is one per process, and this test process shares one.
    script = """
import asyncio, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tui_support import make_config, make_env
from didactyl_tui.agent.llm.worker_client import worker
from didactyl_tui.service.app import AppService

async def main():
    config = make_config(llm_base_url="http://127.0.0.1:9/v1")
    async with AppService(config, data_dir=Path(sys.argv[1]), env=make_env()) as service:
        at_start = worker().running
        preloading = service.preload_llm()
        if preloading is not None:
            preloading.join(60)
        after_preload = worker().running
        session = await service.chat.new_session()
        await service.prompt.dry_run(session, "what do you see?")  # a dry run needs the model's tokenizer
        print(json.dumps({"start": at_start, "preload": after_preload, "dry run": worker().running,
                          "ready": worker().settled.is_set()}))

asyncio.run(main())
"""
    import json

    tests = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data"), tests], capture_output=True,
                         text=True, timeout=240, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"start": False, "preload": False, "dry run": True,
                                                              "ready": True}
