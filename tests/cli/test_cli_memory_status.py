"""``didactyl memory status`` / ``memory history`` / ``memory show --json``'s outbox part, in-process against
real relays on loopback: what is pending, which relay holds which version, lagging relays brought up to date."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

from agent_support import AGENT_KEY, memory_event
from bad_inputs_support import cli, cli_env
from memory_support import held, put
from relay_servers import EmbeddedRelayUnderTest

T0 = 1_750_000_000


def relay_config(*urls: str) -> str:
    listed = ", ".join(f'"{u}"' for u in urls)
    return f'[relays]\nembedded = false\nurls = [{listed}]\ntimeout_s = 10.0\n[memory]\nbackend = "none"\n' \
           "[agent]\npublish_profile = false\n"


async def run_cli(env: dict[str, str], *argv: str):
    return await asyncio.to_thread(cli, list(argv), env)


async def test_pending_shows_in_memory_show_and_status_until_the_relay_is_back(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    relay = relays[0]
    await relay.stop()
    env = cli_env(tmp_path, relay_config(relay.url), DIDACTYL_NSEC=AGENT_KEY.nsec())

    saved = await run_cli(env, "memory", "save", "--type", "short_term", "--content", "offline note")
    assert saved.code == 1
    assert saved.line.endswith("; it is kept in the outbox and sent again whenever didactyl runs")
    [event_id] = re.findall(r"as event ([0-9a-f]{64})", saved.stdout)

    shown = await run_cli(env, "memory", "show", "--type", "short_term", "--json")
    assert shown.code == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["content"] == "offline note" and data["event_id"] == event_id  # this device's newest edit
    [pending] = data["pending"]
    assert (pending["event_id"], pending["state"], pending["waiting_for"], pending["accepted_by"]) == (
        event_id, "pending", [relay.url], [])
    assert pending["attempts"] >= 1 and "not_connected" in pending["last_error"]
    plain = await run_cli(env, "memory", "show", "--type", "short_term")
    assert plain.stdout == "offline note\n"
    assert plain.line == f"warning: this version (event {event_id[:8]}) is not on any relay yet: it is pending in " \
                         "the outbox"

    down = await run_cli(env, "memory", "status", "--type", "short_term")
    assert down.code == 1 and down.line == "didactyl: Failed: no relay answered: cannot tell which version each " \
                                           "relay holds"
    assert f"{relay.url}  unreachable" in down.stdout
    assert f"outbox: event {event_id[:8]}: pending" in down.stdout

    await relay.start()
    up = await run_cli(env, "memory", "status", "--json")
    assert up.code == 0, up.stderr
    status = json.loads(up.stdout)
    assert set(status) == {"short_term", "long_term"}  # the memories; each other document has its own status
    st = status["short_term"]
    assert st["newest_event_id"] == event_id and st["pending"] == []
    assert st["relays"][relay.url]["current"] and st["relays"][relay.url]["reachable"]
    assert status["long_term"]["newest_event_id"] is None
    assert [ev.id for ev in await held(relay)] == [event_id]
    again = await run_cli(env, "memory", "show", "--type", "short_term", "--json")
    assert json.loads(again.stdout)["pending"] == []


async def test_status_names_the_lagging_relay_and_brings_it_up_to_date(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    current, lagging = relays
    old = memory_event(AGENT_KEY, "old", T0)
    new = memory_event(AGENT_KEY, "new", T0 + 5)
    await put(current.url, new)
    await put(lagging.url, old)
    env = cli_env(tmp_path, relay_config(current.url, lagging.url), DIDACTYL_NSEC=AGENT_KEY.nsec())

    # Without --fix the report says what it would send.
    looked = await run_cli(env, "memory", "status", "--type", "short_term")
    assert looked.code == 0, looked.stderr
    assert any(line.strip().startswith(lagging.url) and line.endswith(f": lagging (--fix would send {new.id[:8]})")
               for line in looked.stdout.splitlines()), looked.stdout
    assert "brought" not in looked.stdout

    result = await run_cli(env, "memory", "status", "--type", "short_term", "--fix")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"Short-Term Memory: newest {new.id[:8]} (")
    assert any(line.strip().startswith(current.url) and line.endswith(": current") for line in lines), lines
    assert any(line.strip().startswith(lagging.url) and f"{old.id[:8]} (" in line
               and line.endswith(": was lagging, brought up to date") for line in lines), lines
    assert "  brought 1 lagging relay up to date" in lines
    assert [ev.id for ev in await held(lagging)] == [new.id]

    settled = await run_cli(env, "memory", "status", "--type", "short_term", "--json")
    data = json.loads(settled.stdout)["short_term"]
    assert data["brought_up_to_date"] == []
    assert all(r["current"] and not r["lagging"] for r in data["relays"].values())


async def test_history_lists_every_version_with_origin_size_and_note(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    relay = relays[0]
    env = cli_env(tmp_path, relay_config(relay.url), DIDACTYL_NSEC=AGENT_KEY.nsec())
    first = await run_cli(env, "memory", "save", "--type", "long_term", "--content", "v1")
    assert first.code == 0
    v1_id = first.stdout.split(" as event ")[1].split(":")[0]
    assert (await run_cli(env, "memory", "save", "--type", "long_term", "--content", "v2 is longer")).code == 0
    # The phone edited v1, not v2 (its base tag says so): a concurrent edit, v2 lost.
    from_elsewhere = memory_event(AGENT_KEY, "from the phone", int(time.time()) + 60, d="long_term_memory",
                                  prev=v1_id)
    await put(relay.url, from_elsewhere)

    listed = await run_cli(env, "memory", "history", "--type", "long_term", "--json")
    assert listed.code == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert data["type"] == "long_term"
    rows = data["versions"]
    assert [(r["origin"], r["chars"], r["current"]) for r in rows] == [
        ("remote", 14, True), ("local", 12, False), ("local", 2, False)]
    assert rows[0]["event_id"] == from_elsewhere.id
    assert "v2 is longer" not in listed.stdout  # sizes, never the text
    assert rows[1]["note"] == "lost to a newer version from another device"

    text = await run_cli(env, "memory", "history", "--type", "long_term")
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"* {from_elsewhere.id}  ") and lines[0].endswith("remote  14 chars")
    assert lines[1].startswith("  ") and lines[1].endswith("local   12 chars  lost to a newer version from another "
                                                           "device")
    empty = await run_cli(env, "memory", "history", "--type", "short_term")
    assert empty.code == 0 and empty.stdout == "" and empty.line == "(no short-term memory version seen yet)"

    missing = await run_cli(env, "memory", "history")
    assert missing.code == 2 and "--type" in missing.line
    bad = await run_cli(env, "memory", "status", "--type", "mid_term")
    assert bad.code == 2 and "invalid choice: 'mid_term'" in bad.line


async def test_every_document_has_its_own_verbs(relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    """``didactyl profile|contacts|relays|tasks VERB``, as ``memory VERB --type T`` for the memories: one path."""
    env = cli_env(tmp_path, relay_config(relay.url), DIDACTYL_NSEC=AGENT_KEY.nsec())
    profile = json.dumps({"name": "didactyl", "about": "An agent."})
    saved = await run_cli(env, "profile", "save", "--content", profile, "--json")
    assert saved.code == 0, saved.stderr
    event_id = json.loads(saved.stdout)["event_id"]
    shown = await run_cli(env, "profile", "show", "--json")
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["type"] == "profile" and json.loads(shown.stdout)["event_id"] == event_id
    history = await run_cli(env, "profile", "history", "--json")
    assert [v["event_id"] for v in json.loads(history.stdout)["versions"]] == [event_id]
    for name in ("contacts", "relays", "tasks"):
        status = await run_cli(env, name, "status", "--json")
        assert status.code == 0 and name in json.loads(status.stdout), status.stderr
