"""Chat management through the service: failed and cancelled turns keep their message (marked), the last turn
can be taken back (regenerate, edit and resend), and a chat's prompt assemblies come back with it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from agent_support import AGENT_KEY, make_assembly
from llm_stub import LlmStub, Reply
from relay_servers import fast_client_kwargs

from didactyl_tui.agent.conversations import assembly_log
from didactyl_tui.agent.conversations.assembly_log import AssemblyLog, SavedAssembly
from didactyl_tui.agent.conversations.store import ConversationStore
from didactyl_tui.agent.turn.events import TurnFailed, TurnFinished
from didactyl_tui.config import Config
from didactyl_tui.service.app import AppService

pytestmark = pytest.mark.usefixtures("warm_litellm")


def stub_service(stub: LlmStub, data: Path, *, keep: int = 20) -> AppService:
    cfg = Config()
    cfg.relays.embedded_port = 0
    cfg.relays.timeout_s = 2.0
    cfg.llm.model, cfg.llm.api_base, cfg.llm.api_key_env = "openai/stub-model", stub.base_url, "STUB_KEY"
    cfg.llm.timeout_s, cfg.llm.max_retries, cfg.llm.saved_assemblies = 5.0, 0, keep
    cfg.memory.backend = "none"
    return AppService(cfg, data_dir=data, env={"DIDACTYL_NSEC": AGENT_KEY.nsec(), "STUB_KEY": "sk-stub"},
                      relay_client_options=fast_client_kwargs())


async def test_a_failed_turn_keeps_its_message_marked_and_the_chat_is_listed_by_it(tmp_path: Path) -> None:
    async with LlmStub() as stub, stub_service(stub, tmp_path / "d") as svc:
        stub.script(Reply.unauthorized(), Reply.text_reply("Now it works."))
        session = await svc.chat.new_session()
        events = [e async for e in svc.chat.run_turn(session, "first try")]
        assert isinstance(events[-1], TurnFailed)
        assert await svc.chat.session_messages(session) == [
            {"role": "user", "content": "first try", "status": "failed"}]
        [listed] = await svc.chat.sessions.list()
        assert (listed.title, listed.message_count) == ("first try", 1)  # not "(untitled) 0 messages"
        [saved] = await svc.chat.sessions.assemblies(session)
        assert saved.failure and saved.reply is None
        # The retry is a new turn; the failed message is shown but never sent to the model again.
        events = [e async for e in svc.chat.run_turn(session, "first try")]
        assert isinstance(events[-1], TurnFinished)
        sent = [m["content"] for m in stub.requests[-1].messages if m["role"] == "user"]
        assert sent == ["first try"]
        assert [m.get("status") for m in await svc.chat.session_messages(session)] == ["failed", None, None]
        markdown = await svc.chat.sessions.export_markdown(session)
        assert "## You (failed: not answered)" in markdown


async def test_a_cancelled_turn_keeps_its_message_marked_cancelled(tmp_path: Path) -> None:
    async with LlmStub() as stub, stub_service(stub, tmp_path / "d") as svc:
        stub.script(Reply.hang(30))
        session = await svc.chat.new_session()

        async def consume() -> None:
            async for _ in svc.chat.run_turn(session, "never answered"):
                pass

        task = asyncio.create_task(consume())
        async with asyncio.timeout(30):
            while not stub.requests:
                await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await svc.parts.chat.settle()
        assert await svc.chat.session_messages(session) == [
            {"role": "user", "content": "never answered", "status": "cancelled"}]
        [saved] = await svc.chat.sessions.assemblies(session)
        assert saved.failure == "cancelled"


async def test_take_back_the_last_turn_and_the_assemblies_come_back_bounded(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with LlmStub() as stub:
        async with stub_service(stub, data, keep=2) as svc:
            stub.script(*(Reply.text_reply(f"answer {n}") for n in range(3)))
            session = await svc.chat.new_session()
            finished = []
            for n in range(3):
                events = [e async for e in svc.chat.run_turn(session, f"question {n}")]
                finished.append(events[0].assembly)
            assert await svc.chat.sessions.pop_last_turn(session) == "question 2"
            assert [m["content"] for m in await svc.chat.session_messages(session)] == [
                "question 0", "answer 0", "question 1", "answer 1"]
            assert await svc.chat.sessions.pop_last_turn(await svc.chat.new_session()) is None
        # Another run: the newest two assemblies, whole, with their replies.
        async with stub_service(stub, data, keep=2) as svc:
            saved = await svc.chat.sessions.assemblies(session)
            assert [s.reply for s in saved] == ["answer 1", "answer 2"]
            assert [s.assembly for s in saved] == finished[1:]
            assert saved[0].prompt_tokens == 11
            assert await svc.chat.sessions.delete(session)
            assert await svc.chat.sessions.assemblies(session) == []


def test_assembly_log_refuses_huge_records_and_skips_damaged_ones(tmp_path: Path, monkeypatch) -> None:

    store = ConversationStore(tmp_path / "c.sqlite3")
    session = store.new_session()
    log = AssemblyLog(store, keep=5)
    assert log.add(session, SavedAssembly(make_assembly("small"), reply="ok"))
    monkeypatch.setattr(assembly_log, "MAX_RECORD_BYTES", 200)
    assert not log.add(session, SavedAssembly(make_assembly("x" * 50_000), reply="too big"))
    monkeypatch.undo()
    with sqlite3.connect(tmp_path / "c.sqlite3") as db:  # a damaged row, as a disk or another program might leave
        db.execute("INSERT INTO assemblies (session_id, created_at, record) VALUES (?, 0, ?)", (session, b"junk"))
    [kept] = log.load(session)
    assert kept.reply == "ok" and kept.assembly.user_message == "small"
    assert not AssemblyLog(store, keep=0).add(session, SavedAssembly(make_assembly()))
    store.close()
