"""``chat --json`` gives the session id, ``chat --session`` continues it, ``sessions ...`` manage the saved chats:
the real console entry in subprocesses, the real litellm against the HTTP stub."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from agent_support import AGENT_KEY
from cli_support import cli_env, didactyl, one_line
from llm_stub import LlmStub, Reply


async def _chat(env: dict[str, str], *args: str) -> dict:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "didactyl_tui", "chat", *args, "--json",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return json.loads(out)


async def test_a_script_continues_lists_shows_exports_renames_and_deletes_a_session(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("First answer."), Reply.text_reply("Second answer."))
        config = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                  '[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n')
        env = cli_env(tmp_path, config, DIDACTYL_NSEC=AGENT_KEY.nsec(), STUB_KEY="sk-stub")
        first = await _chat(env, "-m", "remember the word teal")
        session = first["session_id"]
        assert len(session) == 32 and first["reply"] == "First answer."
        second = await _chat(env, "-m", "which word?", "--session", session[:8])  # a unique prefix will do
        assert second["session_id"] == session
        sent = [m["content"] for m in stub.requests[1].messages if m["role"] in ("user", "assistant")]
        assert sent[-3:] == ["remember the word teal", "First answer.", "which word?"]

    listed = didactyl(env, "sessions", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [info] = json.loads(listed.stdout)
    assert info["id"] == session and info["message_count"] == 4 and info["title"] == "remember the word teal"
    text_list = didactyl(env, "sessions", "list")
    assert text_list.stdout.startswith(session) and "4 msgs" in text_list.stdout

    shown = json.loads(didactyl(env, "sessions", "show", session, "--json").stdout)
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "user", "assistant"]
    markdown = didactyl(env, "sessions", "export", session[:6])
    assert markdown.returncode == 0 and "## You" in markdown.stdout and "Second answer." in markdown.stdout
    target = tmp_path / "chat.json"
    exported = didactyl(env, "sessions", "export", session, "--json", "-o", str(target))
    assert exported.returncode == 0 and json.loads(target.read_text())["id"] == session
    assert oct(target.stat().st_mode & 0o777) == "0o600"

    renamed = didactyl(env, "sessions", "rename", session, "Teal\x1b[31m talk", "--json")
    assert json.loads(renamed.stdout)["title"] == "Teal\x1b[31m talk"  # stored as given (JSON escapes it)
    assert "\x1b" not in didactyl(env, "sessions", "list").stdout  # a terminal never gets the escape
    deleted = didactyl(env, "sessions", "delete", session, "--json")
    assert json.loads(deleted.stdout) == {"id": session, "deleted": True}
    assert json.loads(didactyl(env, "sessions", "list", "--json").stdout) == []


def test_unknown_or_ambiguous_ids_are_one_line_and_exit_2(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    for args in (["show", "feedface"], ["delete", "x"], ["rename", "abcd", "t"], ["export", "0000"]):
        proc = didactyl(env, "sessions", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "no conversation" in one_line(proc.stderr)
    proc = didactyl(env, "chat", "-m", "hi", "--session", "feedface")
    assert proc.returncode == 2 and "no conversation 'feedface'" in one_line(proc.stderr)
