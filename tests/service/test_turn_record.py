"""What a turn leaves in the chat, through the service and real litellm against the stub: each tool result keeps
how its call ended (done, error, refused); a turn cancelled or cut off part way keeps what it had said and done so
far, every message marked (shown after a resume, never sent to the model again)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from agent_support import AGENT_KEY
from llm_stub import LlmStub, Reply, ToolCall
from relay_servers import fast_client_kwargs

from didactyl_tui.agent.tools.permission import Decision
from didactyl_tui.agent.turn.events import TextDelta, TurnFailed, TurnFinished
from didactyl_tui.agent.turn.record import NOT_FINISHED
from didactyl_tui.config import Config
from didactyl_tui.service.app import AppService

pytestmark = pytest.mark.usefixtures("warm_litellm")

BAD_SAVE = json.dumps({"type": "nonsense", "content": "x"})
GOOD_SAVE = json.dumps({"type": "short_term", "content": "Ada likes tea."})


def stub_service(stub: LlmStub, data: Path, *, calls_per_turn: int = 64) -> AppService:
    cfg = Config()
    cfg.relays.embedded_port = 0
    cfg.relays.timeout_s = 2.0
    cfg.llm.model, cfg.llm.api_base, cfg.llm.api_key_env = "openai/stub-model", stub.base_url, "STUB_KEY"
    cfg.llm.timeout_s, cfg.llm.max_retries = 5.0, 0
    cfg.llm.max_tool_calls_per_turn = calls_per_turn
    cfg.memory.backend = "none"
    return AppService(cfg, data_dir=data, env={"DIDACTYL_NSEC": AGENT_KEY.nsec(), "STUB_KEY": "sk-stub"},
                      relay_client_options=fast_client_kwargs())


def call(call_id: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "memory_save", "arguments": arguments}}


async def test_each_tool_result_keeps_how_its_call_ended(tmp_path: Path) -> None:
    async with LlmStub() as stub, stub_service(stub, tmp_path / "d", calls_per_turn=2) as svc:
        stub.script(Reply.tools(ToolCall("memory_save", BAD_SAVE, id="bad"),
                                ToolCall("memory_save", GOOD_SAVE, id="good"),
                                ToolCall("memory_save", GOOD_SAVE, id="over")),
                    Reply.text_reply("Saved once."))
        session = await svc.chat.new_session()
        events = [e async for e in svc.chat.run_turn(session, "remember")]
        finished = events[-1]
        assert isinstance(finished, TurnFinished)
        assert [(c.call_id, c.ending) for c in finished.tool_calls] == [
            ("bad", "error"), ("good", "done"), ("over", "refused")]
        kept = await svc.chat.session_messages(session)
        assert [(m.get("tool_call_id"), m.get("ending")) for m in kept if m["role"] == "tool"] == [
            ("bad", "error"), ("good", "done"), ("over", "refused")]
        # The ending is for showing: the model reads the results as they were, nothing more.
        stub.script(Reply.text_reply("ok"))
        [e async for e in svc.chat.run_turn(session, "next")]
        assert not [m for m in stub.requests[-1].messages if "ending" in m or "status" in m]


async def test_a_cancelled_turn_keeps_what_it_said_and_did_so_far_marked(tmp_path: Path) -> None:
    async with LlmStub() as stub, stub_service(stub, tmp_path / "d") as svc:
        stub.script(Reply.tools(ToolCall("memory_save", BAD_SAVE, id="c1"), text="Let me note that."),
                    Reply.text_reply("Half of the answer and the rest", pauses={3: 60.0}))
        session = await svc.chat.new_session()
        text: list[str] = []

        async def consume() -> None:
            async for event in svc.chat.run_turn(session, "go"):
                if isinstance(event, TextDelta):
                    text.append(event.text)

        task = asyncio.create_task(consume())
        async with asyncio.timeout(30):
            while "answer" not in "".join(text):
                await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await svc.parts.chat.settle()
        kept = await svc.chat.session_messages(session)
        error = kept[2]["content"]
        assert error.startswith("Error:") and "nonsense" in error
        assert kept == [
            {"role": "user", "content": "go", "status": "cancelled"},
            {"role": "assistant", "content": "Let me note that.", "tool_calls": [call("c1", BAD_SAVE)],
             "status": "cancelled"},
            {"role": "tool", "tool_call_id": "c1", "content": error, "ending": "error", "status": "cancelled"},
            {"role": "assistant", "content": "Half of the answer", "status": "cancelled"}]
        # Shown, never sent again: the next turn's prompt holds none of it.
        stub.script(Reply.text_reply("Fresh."))
        events = [e async for e in svc.chat.run_turn(session, "again")]
        assert isinstance(events[-1], TurnFinished)
        assert [m["role"] for m in stub.requests[-1].messages if m["role"] != "system"] == ["user"]


async def test_a_call_still_running_when_the_turn_is_cancelled_ends_cancelled(tmp_path: Path) -> None:
    note = json.dumps({"text": "Hello, Nostr."})
    async with LlmStub() as stub, stub_service(stub, tmp_path / "d") as svc:
        stub.script(Reply.tools(ToolCall("post_note", note, id="slow")))
        asked = asyncio.Event()

        async def ask(request: object) -> Decision:  # the person has not answered yet when the turn is cancelled
            asked.set()
            await asyncio.Event().wait()
            return Decision.DENY

        svc.permissions.register_asker(ask)
        session = await svc.chat.new_session()

        async def consume() -> None:
            async for _ in svc.chat.run_turn(session, "post it"):
                pass

        task = asyncio.create_task(consume())
        await asyncio.wait_for(asked.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await svc.parts.chat.settle()
        kept = await svc.chat.session_messages(session)
        assert kept[1:] == [
            {"role": "assistant", "content": None, "status": "cancelled", "tool_calls": [
                {"id": "slow", "type": "function", "function": {"name": "post_note", "arguments": note}}]},
            {"role": "tool", "tool_call_id": "slow", "content": NOT_FINISHED, "ending": "cancelled",
             "status": "cancelled"}]


async def test_a_reply_cut_off_by_the_connection_keeps_its_part_marked_interrupted(tmp_path: Path) -> None:
    async with LlmStub() as stub, stub_service(stub, tmp_path / "d") as svc:
        stub.script(Reply.text_reply("one two three four", fail_after_chunks=3))
        session = await svc.chat.new_session()
        events = [e async for e in svc.chat.run_turn(session, "count")]
        assert isinstance(events[-1], TurnFailed)
        assert await svc.chat.session_messages(session) == [
            {"role": "user", "content": "count", "status": "failed"},
            {"role": "assistant", "content": "one two", "status": "interrupted"}]
        markdown = await svc.chat.sessions.export_markdown(session)
        assert "## You (failed: answered in part)" in markdown and "## Agent (interrupted)" in markdown
