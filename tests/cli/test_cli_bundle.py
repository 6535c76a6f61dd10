"""Backup bundles from the real console entry: export from one data dir (its own embedded relay), import into
an empty one (another embedded relay): memory, soul, tasks and sessions come back identical; a tampered
bundle is refused naming the event, and restores nothing."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from agent_support import AGENT_KEY
from cli_support import cli_env, didactyl, one_line
from llm_stub import LlmStub, Reply, ToolCall

from didactyl_tui.agent.conversations.records import export_records
from didactyl_tui.agent.conversations.store import ConversationStore


def _config(stub_url: str) -> str:
    return (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub_url}"\napi_key_env = "STUB_KEY"\n'
            '[relays]\nembedded_port = 0\ntimeout_s = 3.0\n[memory]\nbackend = "none"\n')


def _state(env: dict[str, str]) -> dict[str, object]:
    def run(*args: str) -> dict:
        proc = didactyl(env, *args, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    memories = {}
    for t in ("short_term", "long_term"):
        snap = run("memory", "show", "--type", t)
        memories[t] = {k: snap[k] for k in ("content", "event_id", "created_at", "chars")}
    store = ConversationStore(Path(env["DIDACTYL_DATA_DIR"]) / "conversations.sqlite3")
    try:
        sessions = export_records(store)
    finally:
        store.close()
    return {"memory": memories, "soul": run("soul", "show"), "tasks": run("tasks"), "sessions": sessions}


async def test_export_then_import_into_an_empty_data_dir_restores_the_same_agent(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.tools(ToolCall("task_add", json.dumps({"title": "water the plants"}))),
                    Reply.text_reply("I will remind you."))
        old = cli_env(tmp_path / "old", _config(stub.base_url), DIDACTYL_NSEC=AGENT_KEY.nsec(), STUB_KEY="sk")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "didactyl_tui", "chat", "-m", "remind me to water the plants", env=old,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 90)
        assert proc.returncode == 0, err.decode()
    for t, text in (("short_term", "Ada likes tea."), ("long_term", "Ada was born in 1815.")):
        assert didactyl(old, "memory", "save", "--type", t, "--content", text).returncode == 0
    before = _state(old)
    assert before["tasks"]["tasks"][0]["title"] == "water the plants" and len(before["sessions"]) == 1
    assert before["soul"]["event_id"] is not None  # the configured soul, published at the first start

    bundle = tmp_path / "agent.bundle"
    exported = didactyl(old, "bundle", "export", str(bundle), "--json")
    assert exported.returncode == 0, exported.stderr
    assert oct(bundle.stat().st_mode & 0o777) == "0o600"
    text = bundle.read_text()
    assert "Ada likes tea" not in text and "water the plants" not in text  # encrypted inside

    new = cli_env(tmp_path / "new", _config("http://127.0.0.1:9"), DIDACTYL_NSEC=AGENT_KEY.nsec())
    imported = didactyl(new, "bundle", "import", str(bundle), "--json")
    assert imported.returncode == 0, imported.stderr
    report = json.loads(imported.stdout)
    assert report["skipped"] == [] and report["accepted"] == report["events"]
    assert _state(new) == before


def test_a_tampered_bundle_is_refused_naming_the_event(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "a", DIDACTYL_NSEC=AGENT_KEY.nsec())
    assert didactyl(env, "memory", "save", "--type", "short_term", "--content", "Ada likes tea.").returncode == 0
    bundle = tmp_path / "agent.bundle"
    assert didactyl(env, "bundle", "export", str(bundle)).returncode == 0
    data = json.loads(bundle.read_text())
    n, victim = next((n, ev) for n, ev in enumerate(data["events"], 1) if ev["kind"] == 30078)
    victim["content"] = victim["content"][:-4] + ("AAAA" if not victim["content"].endswith("AAAA") else "BBBB")
    bundle.write_text(json.dumps(data))
    fresh = cli_env(tmp_path / "b", DIDACTYL_NSEC=AGENT_KEY.nsec())
    refused = didactyl(fresh, "bundle", "import", str(bundle))
    line = one_line(refused.stderr)
    assert refused.returncode == 2 and f"event #{n} (kind 30078, id {victim['id'][:4]}" in line, line
    shown = didactyl(fresh, "memory", "show", "--type", "short_term", "--json")
    assert json.loads(shown.stdout)["content"] == ""  # nothing restored
    assert not os.path.exists(tmp_path / "b" / "data" / "conversations.sqlite3") or not export_records(
        ConversationStore(tmp_path / "b" / "data" / "conversations.sqlite3"))
