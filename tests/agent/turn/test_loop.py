"""The agent loop end to end: real litellm talking HTTP to the OpenAI-compatible stub server (tests/llm_stub.py).

litellm runs in this test process's model helper (warmed once by conftest's ``warm_litellm``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from agent_support import make_assembly
from llm_stub import LlmStub, Reply, ToolCall
from relay_servers import free_port

from didactyl_tui.agent.llm.types import LlmSettings
from didactyl_tui.agent.soul.prompt_record import PromptAssembly
from didactyl_tui.agent.tools.registry import ToolRegistry
from didactyl_tui.agent.turn.events import (
    TextComplete,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)
from didactyl_tui.agent.turn.loop import FINAL_ANSWER_NUDGE, run_turn

API_KEY = "sk-stub-secret-key-0123456789"


def settings_for(stub: LlmStub, **kw: Any) -> LlmSettings:
    base: dict[str, Any] = dict(model="openai/stub-model", api_base=stub.base_url, api_key=API_KEY, timeout_s=3.0,
                                max_retries=2, retry_backoff_s=0.01, max_retry_wait_s=2.0)
    base.update(kw)
    return LlmSettings(**base)


class Tools:
    """A real registry with tools that let tests observe concurrency and failures."""

    def __init__(self) -> None:
        self.registry = ToolRegistry()
        self.b_started = asyncio.Event()
        self.cancelled: list[str] = []
        self.sleeping = asyncio.Event()  # sleep_forever is running
        reg = self.registry

        @reg.tool()
        def add(a: int, b: int) -> dict[str, int]:
            """Add two numbers.

            Args:
                a: first
                b: second
            """
            return {"sum": a + b}

        @reg.tool()
        async def wait_for_b() -> str:
            """Finish only once tool b has started (proves calls in one round run concurrently)."""
            try:
                await asyncio.wait_for(self.b_started.wait(), 3.0)
            except TimeoutError:
                return "b never started while a was running: not concurrent"
            await asyncio.sleep(0.05)  # finish after b
            return "a done"

        @reg.tool()
        async def b() -> str:
            """Signal a."""
            self.b_started.set()
            return "b done"

        @reg.tool()
        def boom() -> str:
            """Always fails."""
            raise RuntimeError("the flux capacitor is empty")

        @reg.tool()
        async def sleep_forever() -> str:
            """Never returns (until cancelled)."""
            self.sleeping.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.append("sleep_forever")
                raise
            return "unreachable"

    async def dispatch(self, name: str, arguments: str):
        return await self.registry.call(name, arguments)


async def collect(settings: LlmSettings, tools: Tools | None = None, *, max_tool_rounds: int = 4,
                  assembly: PromptAssembly | None = None, flush_interval_s: float = 0.04) -> list[Any]:
    tools = tools or Tools()
    assembly = assembly or make_assembly(tools=tools.registry.openai_schemas())
    return [ev async for ev in run_turn(settings=settings, assembly=assembly, dispatch=tools.dispatch,
                                        session_id="s1", max_tool_rounds=max_tool_rounds,
                                        flush_interval_s=flush_interval_s)]


def last(events: list[Any]) -> Any:
    return events[-1]


# --- replies ------------------------------------------------------------------------------------


async def test_streamed_text_reply_and_what_was_sent(stub: LlmStub) -> None:
    stub.script(Reply.text_reply("Hello there, how can I help?", usage=(21, 8)))
    tools = Tools()
    assembly = make_assembly("hi", tools.registry.openai_schemas())
    events = await collect(settings_for(stub), tools, assembly=assembly)

    assert isinstance(events[0], TurnStarted) and events[0].assembly is assembly
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "Hello there, how can I help?"
    done = last(events)
    assert isinstance(done, TurnFinished)
    assert done.reply == text and done.rounds == 1 and done.tool_calls == []
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (21, 8)
    assert done.usage.cost_usd is None  # the stub model has no price
    assert done.new_messages == [{"role": "assistant", "content": text}]

    (req,) = stub.requests
    assert req.body["model"] == "stub-model"  # the openai/ prefix is litellm's, not the server's
    assert req.body["stream"] is True
    assert req.body["stream_options"] == {"include_usage": True}
    assert req.tool_names == ["add", "wait_for_b", "b", "boom", "sleep_forever"]
    assert req.messages == list(assembly.messages)
    assert req.headers["Authorization"] == f"Bearer {API_KEY}"


async def test_many_tiny_deltas_are_coalesced(stub: LlmStub) -> None:
    pieces = [f"w{i} " for i in range(300)]
    stub.script(Reply.text_reply("".join(pieces), chunks=pieces))
    events = await collect(settings_for(stub), flush_interval_s=0.05)
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(deltas) == "".join(pieces)
    assert len(deltas) < 60  # never one event per token (300 chunks here)


async def test_text_waiting_in_a_pause_is_flushed_by_the_timer(stub: LlmStub) -> None:
    # "b" arrives right after "a" was flushed, then the stream pauses: "b" must not wait for "c".
    stub.script(Reply.text_reply("abc", chunks=["a", "b", "c"], pauses={1: 0.8}))
    events = await collect(settings_for(stub), flush_interval_s=0.15)
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    # ["a", "b", "c"], or ["ab", "c"] when the helper process read "a" and "b" together: never "bc".
    assert "".join(deltas[:-1]) == "ab" and deltas[-1] == "c"


async def test_two_parallel_calls_then_final_answer(stub: LlmStub) -> None:
    stub.script(
        Reply.tools(ToolCall("wait_for_b", "{}", id="call_A"), ToolCall("b", "", id="call_B"), usage=(13, 5)),
        Reply.text_reply("Both done.", usage=(40, 3)),
    )
    tools = Tools()
    events = await collect(settings_for(stub), tools)

    started = [e for e in events if isinstance(e, ToolCallStarted)]
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [(e.call_id, e.name, e.round) for e in started] == [("call_A", "wait_for_b", 1), ("call_B", "b", 1)]
    # Concurrent: a waited for b to start, so b finished first.
    assert [e.call_id for e in finished] == ["call_B", "call_A"]
    assert {e.call_id: e.result for e in finished} == {"call_A": "a done", "call_B": "b done"}

    done = last(events)
    assert isinstance(done, TurnFinished)
    assert done.reply == "Both done." and done.rounds == 2
    assert [c.call_id for c in done.tool_calls] == ["call_A", "call_B"]  # the model's order
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (53, 8)

    second = stub.requests[1].messages
    assistant, result_a, result_b = second[-3:]
    assert assistant["role"] == "assistant"
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_A", "call_B"]
    # Results are fed back in the original order, whatever order they finished in.
    assert (result_a["role"], result_a["tool_call_id"], result_a["content"]) == ("tool", "call_A", "a done")
    assert (result_b["tool_call_id"], result_b["content"]) == ("call_B", "b done")
    assert [m["role"] for m in done.new_messages] == ["assistant", "tool", "tool", "assistant"]
    assert done.new_messages[-1] == {"role": "assistant", "content": "Both done."}
    assert stub.requests[1].tool_names  # tools still offered in round 2


async def test_text_before_tool_calls_and_the_final_answer_are_separate_paragraphs(stub: LlmStub) -> None:
    stub.script(Reply.tools(ToolCall("add", '{"a": 1, "b": 2}'), text="Let me add that."),
                Reply.text_reply("It is 3."))
    events = await collect(settings_for(stub))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Let me add that.\n\nIt is 3."
    done = last(events)
    assert done.reply == "It is 3."  # the answer; the first round's text stays on its assistant message
    assert done.new_messages[0]["content"] == "Let me add that."


async def test_the_text_is_whole_as_the_model_says_so_not_when_its_stream_closes(stub: LlmStub) -> None:
    """TextComplete comes once, after the last text and before the turn ends, while the stream is still open (the
    stub holds its usage chunk and [DONE] back); never in a round that calls tools."""
    stub.script(Reply.tools(ToolCall("add", '{"a": 1, "b": 2}'), text="Let me add that."),
                Reply.text_reply("It is 3.", end_pause_s=2.0))
    events: list[Any] = []
    open_at_complete: list[int] = []
    tools = Tools()
    async for event in run_turn(settings=settings_for(stub), assembly=make_assembly(
            tools=tools.registry.openai_schemas()), dispatch=tools.dispatch, session_id="s1", max_tool_rounds=4,
            flush_interval_s=0.04):
        events.append(event)
        if isinstance(event, TextComplete):
            open_at_complete.append(stub.open_streams)
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("TextComplete") == 1
    at = kinds.index("TextComplete")
    assert kinds.index("ToolCallFinished") < at  # not in the tool round
    assert "".join(e.text for e in events[:at] if isinstance(e, TextDelta)) == "Let me add that.\n\nIt is 3."
    assert kinds[at + 1:] == ["TurnFinished"]
    assert open_at_complete == [1]  # the stream had not closed yet
    assert last(events).reply == "It is 3."


async def test_malformed_tool_arguments_go_back_to_the_model(stub: LlmStub) -> None:
    stub.script(Reply.tools(ToolCall("add", '{"a": 1, "b":', id="c1")), Reply.text_reply("Sorry, retrying."))
    events = await collect(settings_for(stub))
    (fin,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert fin.is_error and "not valid JSON" in fin.result
    assert fin.arguments == {"_raw": '{"a": 1, "b":'}
    sent = stub.requests[1].messages
    assert sent[-1] == {"role": "tool", "tool_call_id": "c1", "content": fin.result}
    assert sent[-2]["tool_calls"][0]["function"]["arguments"] == "{}"  # history keeps parseable arguments
    assert isinstance(last(events), TurnFinished) and last(events).reply == "Sorry, retrying."


async def test_unknown_tool_is_a_readable_result(stub: LlmStub) -> None:
    stub.script(Reply.tools(ToolCall("launch_rockets", '{"count": 3}')), Reply.text_reply("I cannot do that."))
    events = await collect(settings_for(stub))
    (fin,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert fin.is_error and 'there is no tool "launch_rockets"' in fin.result and "add" in fin.result
    assert stub.requests[1].messages[-1]["content"] == fin.result
    assert isinstance(last(events), TurnFinished)


async def test_a_tool_that_raises_does_not_end_the_turn(stub: LlmStub) -> None:
    stub.script(Reply.tools(ToolCall("boom", "{}"), ToolCall("add", '{"a": 2, "b": 3}')),
                Reply.text_reply("One failed, one worked."))
    events = await collect(settings_for(stub))
    results = {e.name: e for e in events if isinstance(e, ToolCallFinished)}
    assert results["boom"].is_error and "the flux capacitor is empty" in results["boom"].result
    assert not results["add"].is_error and json.loads(results["add"].result) == {"sum": 5}
    assert isinstance(last(events), TurnFinished) and last(events).reply == "One failed, one worked."


async def test_after_max_tool_rounds_the_model_must_answer_without_tools(stub: LlmStub) -> None:
    stub.script(Reply.tools(ToolCall("add", '{"a": 1, "b": 1}')), Reply.text_reply("Final: 2."))
    events = await collect(settings_for(stub), max_tool_rounds=1)
    done = last(events)
    assert isinstance(done, TurnFinished) and done.reply == "Final: 2." and done.rounds == 2
    final_request = stub.requests[1].body
    assert "tools" not in final_request
    assert final_request["messages"][-1] == {"role": "system", "content": FINAL_ANSWER_NUDGE}
    assert all(m.get("content") != FINAL_ANSWER_NUDGE for m in done.new_messages)  # never persisted


async def test_tool_calls_in_the_forced_final_round_are_ignored(stub: LlmStub) -> None:
    stub.script(Reply.tools(ToolCall("add", '{"a": 1, "b": 1}')), Reply.tools(ToolCall("add", '{"a": 2, "b": 2}')))
    events = await collect(settings_for(stub), max_tool_rounds=1)
    done = last(events)
    assert isinstance(done, TurnFinished)
    assert "stopped after 1 rounds of tool calls" in done.reply
    assert len([e for e in events if isinstance(e, ToolCallFinished)]) == 1


# --- faults -------------------------------------------------------------------------------------


async def test_429_honours_retry_after_then_succeeds(stub: LlmStub) -> None:
    stub.script(Reply.rate_limited(0.4), Reply.text_reply("Made it."))
    events = await collect(settings_for(stub))
    assert isinstance(last(events), TurnFinished) and last(events).reply == "Made it."
    first, second = stub.requests
    assert second.at - first.at >= 0.35  # waited for Retry-After, not the 0.01 s backoff


async def test_429_with_a_retry_after_beyond_the_cap_fails_at_once(stub: LlmStub) -> None:
    stub.script(Reply.rate_limited(120), Reply.text_reply("never"))
    events = await collect(settings_for(stub, max_retry_wait_s=5))
    failed = last(events)
    assert isinstance(failed, TurnFailed) and failed.retryable
    assert "Rate limited" in failed.message and "120 s" in failed.message
    assert len(stub.requests) == 1


async def test_500_is_retried_then_a_clear_error(stub: LlmStub) -> None:
    stub.script(Reply.server_error(), Reply.server_error(), Reply.server_error(), Reply.text_reply("late"))
    events = await collect(settings_for(stub, max_retries=2))
    failed = last(events)
    assert isinstance(failed, TurnFailed) and failed.retryable
    assert "server error 500" in failed.message and "\n" not in failed.message
    assert failed.title == "LLM server error"
    assert len(stub.requests) == 3  # one try + two retries, no more (litellm's own retries are off)
    assert not any(isinstance(e, TextDelta) for e in events)


async def test_500_then_success(stub: LlmStub) -> None:
    stub.script(Reply.server_error(), Reply.text_reply("Recovered."))
    events = await collect(settings_for(stub))
    assert isinstance(last(events), TurnFinished) and last(events).reply == "Recovered."
    assert len(stub.requests) == 2


async def test_401_is_an_auth_error_that_never_shows_the_key(stub: LlmStub) -> None:
    stub.script(Reply.unauthorized(echo_key=True), Reply.text_reply("never"))
    events = await collect(settings_for(stub))
    failed = last(events)
    assert isinstance(failed, TurnFailed) and not failed.retryable
    assert failed.title == "LLM authentication failed"
    assert "rejected the API key" in failed.message and "api_key_env" in failed.message
    assert API_KEY not in failed.message and API_KEY[8:20] not in failed.message
    assert len(stub.requests) == 1


async def test_context_too_long(stub: LlmStub) -> None:
    stub.script(Reply.context_too_long())
    events = await collect(settings_for(stub))
    failed = last(events)
    assert isinstance(failed, TurnFailed) and not failed.retryable
    assert "too long" in failed.message and "new chat" in failed.message
    assert len(stub.requests) == 1


async def test_a_hang_past_the_timeout_fails_in_bounded_time(stub: LlmStub) -> None:
    stub.script(Reply.hang(30))
    start = time.monotonic()
    events = await collect(settings_for(stub, timeout_s=0.5, max_retries=2))
    elapsed = time.monotonic() - start
    failed = last(events)
    assert isinstance(failed, TurnFailed) and failed.retryable
    assert failed.title == "LLM timed out" and "0.5 s" in failed.message
    assert len(stub.requests) == 1  # a timeout is not retried automatically: the user already waited
    assert elapsed < 5.0


async def test_a_stream_that_stalls_midway_times_out(stub: LlmStub) -> None:
    stub.script(Reply.text_reply("one two three", chunks=["one", " two", " three"], pauses={0: 30}))
    events = await collect(settings_for(stub, timeout_s=0.6))
    failed = last(events)
    assert isinstance(failed, TurnFailed)
    assert "cut off" in failed.message and "did not answer" in failed.message
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["one"]
    assert len(stub.requests) == 1  # never retried after output was streamed


async def test_a_connection_dropped_mid_reply_is_not_retried(stub: LlmStub) -> None:
    stub.script(Reply.text_reply("one two three four", fail_after_chunks=3), Reply.text_reply("again"))
    events = await collect(settings_for(stub))
    failed = last(events)
    assert isinstance(failed, TurnFailed) and failed.retryable
    assert "cut off" in failed.message and "dropped" in failed.message
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "one two"
    assert len(stub.requests) == 1


async def test_a_connection_dropped_before_any_text_is_retried(stub: LlmStub) -> None:
    stub.script(Reply.text_reply("lost", fail_after_chunks=1), Reply.text_reply("Second try."))
    events = await collect(settings_for(stub))
    assert isinstance(last(events), TurnFinished) and last(events).reply == "Second try."
    assert len(stub.requests) == 2


async def test_unreachable_server_is_a_connection_error() -> None:
    port = free_port()  # nothing listens there: this worker's own port, so no other test's server either
    settings = LlmSettings(model="openai/stub-model", api_base=f"http://127.0.0.1:{port}/v1", api_key=API_KEY,
                           timeout_s=2, max_retries=1, retry_backoff_s=0.01)
    events = await collect(settings)
    failed = last(events)
    assert isinstance(failed, TurnFailed) and failed.retryable
    assert failed.title == "LLM unreachable" and f"127.0.0.1:{port}" in failed.message


async def test_no_model_configured() -> None:
    events = await collect(LlmSettings(model=""))
    failed = last(events)
    assert isinstance(failed, TurnFailed) and not failed.retryable
    assert failed.title == "No model configured" and "[llm] model" in failed.message


async def test_retry_after_an_error_works_and_the_conversation_is_intact(stub: LlmStub) -> None:
    stub.script(Reply.unauthorized(), Reply.text_reply("Now it works."))
    assembly = make_assembly("remember me")
    first = await collect(settings_for(stub), assembly=assembly)
    assert isinstance(last(first), TurnFailed)
    second = await collect(settings_for(stub), assembly=assembly)
    assert isinstance(last(second), TurnFinished) and last(second).reply == "Now it works."
    assert stub.requests[0].messages == stub.requests[1].messages == list(assembly.messages)


# --- cancellation -------------------------------------------------------------------------------


async def test_cancel_while_streaming_propagates_and_stops_the_request(stub: LlmStub) -> None:
    pieces = [f"t{i} " for i in range(50)]
    stub.script(Reply.text_reply("".join(pieces), chunks=pieces, chunk_delay_s=0.2))
    seen: list[Any] = []
    first_text = asyncio.Event()

    async def consume() -> None:
        async for ev in run_turn(settings=settings_for(stub), assembly=make_assembly(), dispatch=Tools().dispatch,
                                 session_id="s1", max_tool_rounds=2):
            seen.append(ev)
            if isinstance(ev, TextDelta):
                first_text.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_text.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not any(isinstance(e, TurnFinished | TurnFailed) for e in seen)


async def test_cancel_while_a_tool_runs_cancels_the_tool(stub: LlmStub) -> None:
    stub.script(Reply.tools(ToolCall("sleep_forever", "{}")), Reply.text_reply("never"))
    tools = Tools()
    seen: list[Any] = []
    tool_started = asyncio.Event()

    async def consume() -> None:
        assembly = make_assembly(tools=tools.registry.openai_schemas())
        async for ev in run_turn(settings=settings_for(stub), assembly=assembly, dispatch=tools.dispatch,
                                 session_id="s1", max_tool_rounds=2):
            seen.append(ev)
            if isinstance(ev, ToolCallStarted):
                tool_started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(tool_started.wait(), 5)
    await asyncio.wait_for(tools.sleeping.wait(), 5)  # the tool itself runs, not only its announcement
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tools.cancelled == ["sleep_forever"]
    assert not any(isinstance(e, TurnFinished | TurnFailed | ToolCallFinished) for e in seen)
    assert len(stub.requests) == 1
