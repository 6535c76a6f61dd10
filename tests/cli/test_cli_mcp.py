"""``didactyl mcp list`` / ``mcp test`` and an MCP tool in ``didactyl chat``: headless, a tool that acts is denied
unless ``--allow`` or ``[permissions] allow`` allows it. The real console entry, the SDK fixture server over stdio,
real litellm against the HTTP stub, the real embedded relay."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from agent_support import AGENT_KEY
from cli_support import NO_BACKEND, cli_env, didactyl
from llm_stub import LlmStub, Reply, ToolCall
from mcp_support import fixture_toml

LLM = '[llm]\nmodel = "openai/stub-model"\napi_base = "{url}"\napi_key_env = "STUB_KEY"\n'


def test_mcp_list_and_test_start_the_servers_and_a_call_is_denied_unless_allowed(tmp_path: Path) -> None:
    # The bound is the hanging one's, and the one a ready one must start within on a loaded machine.
    config = NO_BACKEND + "[mcp]\nstart_timeout_s = 20\n" + fixture_toml("fx") + fixture_toml("slow", "--hang-at-start")
    env = cli_env(tmp_path, config)
    listed = didactyl(env, "mcp", "list", "--json")
    assert listed.returncode == 1, listed.stderr  # one server failed
    report = json.loads(listed.stdout)
    states = {s["name"]: s for s in report["servers"]}
    assert states["fx"]["state"] == "ready" and "fx__echo" in states["fx"]["tools"]
    assert states["slow"] == {**states["slow"], "state": "failed", "reason": "did not start within 20 s"}
    assert {t["origin"] for t in report["tools"]} == {"MCP server fx"}

    denied = didactyl(env, "mcp", "test", "fx", "--call", "echo", "--arguments", '{"text": "hi"}')
    assert denied.returncode == 1 and "denied: nobody here can allow it" in denied.stdout
    allowed = didactyl(env, "mcp", "test", "fx", "--call", "echo", "--arguments", '{"text": "hi"}',
                       "--allow", "fx__*", "--json")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["call"] == {"name": "fx__echo", "result": "echo: hi", "error": False,
                                                  "refused": False,
                                                  "permission": "allowed by [permissions] allow or --allow"}
    unknown = didactyl(env, "mcp", "test", "nope")
    assert unknown.returncode == 1 and "no MCP server is called 'nope'" in unknown.stderr


def test_the_dry_run_offers_the_mcp_tools_a_turn_would(tmp_path: Path) -> None:
    """``didactyl prompt`` shows what a turn sends, and a turn offers the MCP servers' tools: so does the dry run
    (it listed none before: it did not start the servers)."""
    env = cli_env(tmp_path, NO_BACKEND + "[mcp]\nstart_timeout_s = 20\n" + fixture_toml("fx"),
                  DIDACTYL_NSEC=AGENT_KEY.nsec(), DIDACTYL_MODEL="openai/some-model")
    shown = didactyl(env, "prompt", "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    tools = json.loads(shown.stdout)["tools"]
    assert "fx__echo" in tools and "memory_save" in tools
    assert json.loads(shown.stdout)["tool_origins"]["fx__echo"] == "MCP server fx"  # as docs/mcp.md says
    text = didactyl(env, "prompt")
    assert text.returncode == 0 and "fx__echo" in next(line for line in text.stdout.splitlines()
                                                         if line.startswith("- tools offered:"))


@pytest.mark.usefixtures("warm_litellm")
async def test_chat_refuses_an_mcp_call_by_default_and_runs_it_with_allow(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        env = cli_env(tmp_path, LLM.format(url=stub.base_url) + NO_BACKEND + fixture_toml("fx"),
                      DIDACTYL_NSEC=AGENT_KEY.nsec(), STUB_KEY="sk")
        call = Reply.tools(ToolCall("fx__echo", json.dumps({"text": "hi"})))
        stub.script(call, Reply.text_reply("could not"))
        [refused] = (await _chat(env, "-m", "echo hi"))["tool_calls"]
        assert refused["ending"] == "refused" and "nobody here can allow it" in refused["result"]
        assert "fx__echo" in [t["function"]["name"] for t in stub.requests[0].body["tools"]]  # offered all the same
        stub.script(call, Reply.text_reply("it said hi"))
        [ran] = (await _chat(env, "-m", "echo hi", "--allow", "fx__echo"))["tool_calls"]
        assert (ran["ending"], ran["result"]) == ("done", "echo: hi")


async def _chat(env: dict[str, str], *args: str) -> dict:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "didactyl_tui", "chat", *args, "--json",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)
