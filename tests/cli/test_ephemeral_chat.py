"""``chat --ephemeral``: a turn that leaves no trace — no saved chat, no prompt assembly kept, and the memory
backend (the real recall index) never learns from it; terminal turns do. Real embedded relay, real litellm
against the HTTP stub, the real console entry for the command."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from agent_support import AGENT_KEY
from cli_support import cli_env, didactyl
from llm_stub import LlmStub, Reply
from service_support import stub_config, stub_service

from didactyl_tui.agent.conversations.session_kind import SessionKind
from didactyl_tui.agent.turn.events import TurnFailed, TurnFinished
from didactyl_tui.service.app import AppService

pytestmark = pytest.mark.usefixtures("warm_litellm")


async def _turn(svc: AppService, session: str, message: str, kind: SessionKind) -> object:
    events = [e async for e in svc.chat.run_turn(session, message, kind)]
    return events[-1]


async def test_record_turn_runs_for_terminal_turns_only_never_for_ephemeral_or_dry_runs(tmp_path: Path) -> None:
    async with LlmStub() as stub, stub_service(stub_config(stub.base_url, backend="recall"), tmp_path) as svc:
        recall = svc.parts.runtime.memory_manager.backend
        assert recall is not None and recall.id == "recall"  # the real backend, as [memory] backend names it
        terminal = await svc.chat.new_session()
        stub.script(Reply.text_reply("noted"))
        assert isinstance(await _turn(svc, terminal, "I grow aubergine", SessionKind.TERMINAL), TurnFinished)

        # Ephemeral, continuing the terminal chat: its history reaches the model, nothing is added to it.
        stub.script(Reply.text_reply("noted too"))
        assert isinstance(await _turn(svc, terminal, "I grow parsnip", SessionKind.EPHEMERAL_CHAT), TurnFinished)
        sent = [m["content"] for m in stub.requests[-1].messages if m["role"] == "user"]
        assert sent == ["I grow aubergine", "I grow parsnip"]
        # Ephemeral in a session that was never stored (what `chat --ephemeral` does without --session).
        stub.script(Reply.text_reply("ok"))
        assert isinstance(await _turn(svc, "0" * 32, "I grow salsify", SessionKind.EPHEMERAL_CHAT), TurnFinished)
        # A failed ephemeral turn keeps no marked message either.
        stub.script(Reply.unauthorized())  # not retried
        assert isinstance(await _turn(svc, terminal, "I grow kale", SessionKind.EPHEMERAL_CHAT), TurnFailed)
        await svc.prompt.dry_run(terminal, "I grow turnip")

        found = {w for w in ("aubergine", "parsnip", "salsify", "kale", "turnip") if recall.search(w, 5)}
        assert found == {"aubergine"}
        assert [m["content"] for m in await svc.chat.session_messages(terminal)] == ["I grow aubergine", "noted"]
        assert [s.id for s in await svc.chat.sessions.list(include_empty=True)] == [terminal]
        assert len(await svc.chat.sessions.assemblies(terminal)) == 1  # the terminal turn's prompt only


CONFIG = ('[llm]\nmodel = "openai/stub-model"\napi_base = "{url}"\napi_key_env = "STUB_KEY"\n'
          '[relays]\nembedded_port = 0\ntimeout_s = 2.0\n[memory]\nbackend = "recall"\n')


async def _chat(env: dict[str, str], *args: str) -> dict:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "didactyl_tui", "chat", *args, "--json",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


async def test_chat_ephemeral_from_the_command_line_saves_no_chat(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        env = cli_env(tmp_path, CONFIG.format(url=stub.base_url), DIDACTYL_NSEC=AGENT_KEY.nsec(), STUB_KEY="sk")
        stub.script(Reply.text_reply("hello"))
        kept = await _chat(env, "-m", "remember the blue door")
        assert kept["ephemeral"] is False and kept["session_id"]
        stub.script(Reply.text_reply("a secret is safe"))
        gone = await _chat(env, "--ephemeral", "-m", "this stays off the record")
        assert gone == {**gone, "session_id": None, "ephemeral": True, "reply": "a secret is safe"}
        stub.script(Reply.text_reply("the blue one"))
        side = await _chat(env, "--ephemeral", "--session", kept["session_id"][:8], "-m", "which door?")
        assert side["session_id"] == kept["session_id"] and side["reply"] == "the blue one"
        assert [m["content"] for m in stub.requests[-1].messages if m["role"] == "user"] == [
            "remember the blue door", "which door?"]
    listed = json.loads(await asyncio.to_thread(lambda: didactyl(env, "sessions", "list", "--all", "--json").stdout))
    assert [(s["id"], s["message_count"]) for s in listed] == [(kept["session_id"], 2)]
