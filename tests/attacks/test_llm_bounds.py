"""A hostile (or broken) model: every output is cut at a configured bound (issue #10, "The model").

Real litellm talks HTTP to the OpenAI-compatible stub (tests/llm_stub.py), which generates huge replies as
it sends them. Each test is bounded in time by ``asyncio.timeout`` and asserts the bound itself (sizes,
counts, RSS growth), never a speed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from agent_support import offline_context
from llm_stub import LlmStub, Reply, ToolCall

from didactyl_tui.agent.conversations.store import ConversationStore
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.llm import client as llm
from didactyl_tui.agent.llm.limits import ToolCallGate, TurnLimits
from didactyl_tui.agent.llm.types import LlmSettings
from didactyl_tui.agent.soul.prompt_record import PromptAssembly
from didactyl_tui.agent.tools.files import FILE_TOOLS
from didactyl_tui.agent.tools.memory import MEMORY_TOOLS
from didactyl_tui.agent.tools.registry import ToolRegistry
from didactyl_tui.agent.turn.events import TextDelta, ToolCallFinished, TurnFinished
from didactyl_tui.agent.turn.loop import run_turn
from didactyl_tui.config import LlmConfig

MiB = 1024 * 1024


def settings_for(stub: LlmStub, **limits: Any) -> LlmSettings:
    return LlmSettings(model="openai/stub-model", api_base=stub.base_url, api_key="sk-stub", timeout_s=10.0,
                       max_retries=0, limits=TurnLimits(**limits))


class Agent:
    """The real memory and file tools on an offline store, dispatched the way the service does."""

    def __init__(self, tmp_path: Path) -> None:
        self.ctx = offline_context(tmp_path)
        self.registry = ToolRegistry()
        for tool in (*MEMORY_TOOLS, *FILE_TOOLS):
            self.registry.register(tool)
        self.dispatched = 0

    async def dispatch(self, name: str, arguments: str):
        self.dispatched += 1
        return await self.registry.call(name, arguments, self.ctx)

    def assembly(self) -> PromptAssembly:
        return _assembly_with(self.registry)

    async def turn(self, settings: LlmSettings, *, budget_s: float = 120.0) -> list[Any]:
        async with asyncio.timeout(budget_s):
            return [ev async for ev in run_turn(settings=settings, assembly=self.assembly(), dispatch=self.dispatch,
                                                session_id="s1", max_tool_rounds=4)]


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def peak_rss_while(coro: Any) -> tuple[Any, int]:
    """Run ``coro``, sampling RSS every 20 ms; returns (its result, the highest RSS seen)."""
    peak = rss_bytes()
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, rss_bytes())
            await asyncio.sleep(0.02)

    sampler = asyncio.ensure_future(sample())
    try:
        result = await coro
    finally:
        stop.set()
        await sampler
    return result, max(peak, rss_bytes())


def store_turn(tmp_path: Path, events: list[Any]) -> Path:
    """Persist the turn as the service does; returns the database path."""
    done = events[-1]
    assert isinstance(done, TurnFinished)
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    session = store.new_session()
    store.append(session, [{"role": "user", "content": "go"}, *done.new_messages])
    store.close()
    return tmp_path / "conversations.sqlite3"


def db_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


# --- output size and time ---------------------------------------------------------------------------


async def test_a_three_million_token_reply_is_cut_at_the_bound_with_rss_bounded(stub: LlmStub, tmp_path: Path) -> None:
    # 60,000 chunks of 50 tokens: 3 million tokens (15 MB) if nothing stopped it.
    stub.script(Reply.endless("word " * 50, 60_000))
    agent = Agent(tmp_path)
    before = rss_bytes()
    events, peak = await peak_rss_while(agent.turn(settings_for(stub, max_reply_chars=200_000)))
    done = events[-1]
    assert isinstance(done, TurnFinished)
    assert done.cut is not None and "max_reply_chars" in done.cut
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert shown.endswith("]") and "reply cut short" in shown
    assert done.reply.startswith("word word") and "[reply cut short:" in done.reply
    assert len(done.reply) < 200_000 + 300  # the text up to the bound, and the marker
    assert peak - before < 150 * MiB, f"RSS grew {(peak - before) / MiB:.0f} MiB"
    assert db_bytes(store_turn(tmp_path, events)) < 2 * MiB


async def test_a_two_tokens_per_second_drip_ends_at_the_turn_deadline(stub: LlmStub, tmp_path: Path) -> None:
    # Each chunk arrives well inside the idle timeout, so only the turn deadline can end this.
    stub.script(Reply.text_reply("ready"), Reply.endless(" drip", 10_000, chunk_delay_s=0.5))
    agent = Agent(tmp_path)
    # A first turn with no deadline: the model's helper process is up (an earlier test may have stopped it, and
    # starting one imports litellm: seconds on a loaded machine) before the 2 s deadline is timed.
    await agent.turn(settings_for(stub), budget_s=120)
    events = await agent.turn(settings_for(stub, turn_timeout_s=2.0), budget_s=60)
    done = events[-1]
    assert isinstance(done, TurnFinished)
    assert done.cut is not None and "turn_timeout_s" in done.cut
    assert done.reply.startswith(" drip")  # what did arrive is kept
    assert done.reply.rstrip().endswith("]")
    assert done.new_messages == [{"role": "assistant", "content": done.reply}]


# --- tool arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize("reply_limit", [1_000_000, 64 * MiB], ids=["reply-bound", "argument-bound"])
async def test_a_20_mb_argument_leaves_the_conversations_db_small(stub: LlmStub, tmp_path: Path,
                                                                  reply_limit: int) -> None:
    huge = json.dumps({"path": "big.md", "content": "x" * (20 * 1000 * 1000)})
    stub.script(Reply.tools(ToolCall("write_file", huge), arg_chunk_chars=64 * 1024), Reply.text_reply("ok"))
    agent = Agent(tmp_path)
    events = await agent.turn(settings_for(stub, max_reply_chars=reply_limit))
    assert agent.dispatched == 0  # refused before the tool ran
    assert not (tmp_path / "memory" / "big.md").exists()
    done = events[-1]
    if reply_limit == 1_000_000:  # the whole reply passed its bound first: cut, its call not run
        assert done.cut is not None and "1 tool call(s) were not run" in done.reply
    else:
        (finished,) = [e for e in events if isinstance(e, ToolCallFinished)]
        assert finished.is_error and "max_tool_argument_chars" in finished.result
        assert "20,0" in finished.result  # the model is told the size it sent
    path = store_turn(tmp_path, events)
    assert db_bytes(path) < 1 * MiB, f"{db_bytes(path):,} bytes"
    text = b"".join(p.read_bytes() for p in tmp_path.glob("conversations.sqlite3*"))
    assert b"x" * 10_000 not in text


async def test_200_write_file_calls_of_250_kb_are_capped(stub: LlmStub, tmp_path: Path) -> None:
    calls = [ToolCall("write_file", json.dumps({"path": f"f{n}.md", "content": chr(65 + n % 26) * 250_000}))
             for n in range(200)]
    stub.script(Reply.tools(*calls, arg_chunk_chars=64 * 1024), Reply.text_reply("done"))
    agent = Agent(tmp_path)
    limits = TurnLimits(max_reply_chars=64 * MiB, per_tool={"write_file": 5, "memory_save": 4})
    events = await agent.turn(dataclasses.replace(settings_for(stub), limits=limits))
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert len(finished) == limits.max_tool_calls_per_reply == 16  # the other 184 never became calls
    ran = [e for e in finished if not e.is_error]
    refused = [e for e in finished if e.is_error]
    assert len(ran) == 5 and agent.dispatched == 5
    assert all("max_file_writes_per_turn" in e.result for e in refused)
    assert len(list((tmp_path / "memory").glob("*.md"))) == 5
    done = events[-1]
    assert isinstance(done, TurnFinished) and done.reply == "done"
    tool_messages = [m for m in done.new_messages if m["role"] == "tool"]
    assert "asked for 200 tool calls" in tool_messages[-1]["content"]  # the model is told about the rest
    # Only the five calls that ran keep their arguments (5 x 250 KB); the 96 MB of issue #10 is gone.
    assert db_bytes(store_turn(tmp_path, events)) < 3 * MiB


async def test_1000_memory_saves_in_one_reply_are_capped(stub: LlmStub, tmp_path: Path) -> None:
    calls = [ToolCall("memory_save", json.dumps({"type": "short_term", "content": f"note {n}"}))
             for n in range(1000)]
    stub.script(Reply.tools(*calls, arg_chunk_chars=4096), Reply.text_reply("saved"))
    agent = Agent(tmp_path)
    events = await agent.turn(settings_for(stub))
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    ran = [e for e in finished if not e.is_error]
    assert len(ran) == TurnLimits().per_tool_limit("memory_save") == 4
    assert agent.dispatched == 4
    assert all("max_memory_saves_per_turn" in e.result and "one save" in e.result
               for e in finished if e.is_error)
    snap = agent.ctx.memory.snapshot(DocumentKey.SHORT_TERM)
    assert snap.content in {f"note {n}" for n in range(16)}
    # The second request carries 16 calls and 16 results, not 1,000.
    second = stub.requests[1].messages
    assert sum(len(m.get("tool_calls") or ()) for m in second) == 16
    assert "asked for 1,000 tool calls" in second[-1]["content"]


def test_the_limits_come_from_config() -> None:
    cfg = LlmConfig(model="openai/x", max_tokens=512, max_reply_chars=5000, turn_timeout_s=9.0,
                    max_tool_argument_chars=700, max_tool_calls_per_reply=3, max_tool_calls_per_turn=7,
                    max_calls_per_tool=2, max_memory_saves_per_turn=1, max_file_writes_per_turn=2)
    settings = dataclasses.replace(LlmSettings.from_config(cfg, {}), model="openai/y")
    assert settings.max_tokens == 512
    assert settings.limits == TurnLimits(5000, 9.0, 700, 3, 7, 2, {"memory_save": 1, "write_file": 2})
    assert LlmSettings.from_config(LlmConfig(), {}).max_tokens is None  # 0: not sent


async def test_max_tokens_reaches_the_server(stub: LlmStub) -> None:
    stub.script(Reply.text_reply("short"))
    settings = dataclasses.replace(settings_for(stub), max_tokens=123)
    async with asyncio.timeout(60):
        [c async for c in llm.stream_chat(settings, [{"role": "user", "content": "hi"}])]
    assert stub.requests[0].body["max_tokens"] == 123


def test_litellm_is_preloaded_only_when_a_model_is_configured() -> None:
    assert llm.should_preload(LlmSettings.from_config(LlmConfig(model="openai/x"), {}))
    assert not llm.should_preload(LlmSettings.from_config(LlmConfig(model="  "), {}))


async def test_a_turn_past_its_deadline_after_a_tool_round_asks_the_model_nothing_more(stub: LlmStub) -> None:
    registry = ToolRegistry()
    turn_timeout_s = 4.0  # room for the first request on a busy machine; the tool then outlasts the turn
    started = time.monotonic()

    @registry.tool()
    async def slow() -> str:
        """Takes longer than the turn may."""
        await asyncio.sleep(started + turn_timeout_s + 0.3 - time.monotonic())
        return "finally"

    stub.script(Reply.tools(ToolCall("slow", "{}")), Reply.text_reply("never asked"))
    assembly = _assembly_with(registry)

    async def dispatch(name: str, arguments: str):
        return await registry.call(name, arguments)

    async with asyncio.timeout(60):
        events = [ev async for ev in run_turn(settings=settings_for(stub, turn_timeout_s=turn_timeout_s),
                                              assembly=assembly, dispatch=dispatch, session_id="s1",
                                              max_tool_rounds=4)]
    done = events[-1]
    assert isinstance(done, TurnFinished) and done.cut is not None and "turn_timeout_s" in done.cut
    assert len(stub.requests) == 1 and stub.pending == 1
    # The history stays valid: the call, its result, then the marker as the assistant's answer.
    assert [m["role"] for m in done.new_messages] == ["assistant", "tool", "assistant"]
    assert done.new_messages[1]["content"] == "finally"


def _assembly_with(registry: ToolRegistry) -> PromptAssembly:
    messages = ({"role": "system", "content": "You are a test."}, {"role": "user", "content": "go"})
    return PromptAssembly(
        model="openai/stub-model", created_at=0.0, layers=(), history=(), history_dropped=0, backend_id=None,
        backend_context=None, backend_tokens=0, user_message="go", tools=tuple(registry.openai_schemas()),
        messages=messages, total_tokens=0)


def test_the_gate_counts_per_tool_and_per_turn_across_rounds() -> None:
    gate = ToolCallGate(TurnLimits(max_tool_calls_per_turn=6, max_calls_per_tool=3, per_tool={"memory_save": 2}))
    assert [gate.refusal("memory_save", 10) is None for _ in range(3)] == [True, True, False]
    assert [gate.refusal("lookup", 10) is None for _ in range(4)] == [True, True, True, False]
    assert gate.refusal("other", 10) is None  # the 6th call of the turn
    last_word = gate.refusal("other", 10)
    assert last_word is not None and "max_tool_calls_per_turn" in last_word
    too_big = ToolCallGate(TurnLimits()).refusal("write_file", 300_001)
    assert too_big is not None and "300,001" in too_big and "max_tool_argument_chars" in too_big
