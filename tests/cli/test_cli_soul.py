"""The soul through the relays, from the real console entry: ``soul publish``, then a newer kind 31120 made by
rust-nostr (the same agent on another device) changes what ``prompt --json`` assembles; a soul naming an
unknown tool is refused with the section's name and nothing is published."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from agent_support import AGENT_KEY
from cli_support import cli_env, didactyl, one_line
from relay_servers import RelayUnderTest, fast_client_kwargs

from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.kinds import SOUL
from didactyl_tui.nostr.pool import RelayPool

nostr_sdk = pytest.importorskip("nostr_sdk")

CONFIG = """[relays]
embedded = false
urls = ["{url}"]
timeout_s = 3.0
[memory]
backend = "none"
[[soul.sections]]
section = "persona"
content = "You are Config Didactyl."
[[soul.sections]]
section = "agent_identity"
tool = "agent_identity"
"""


def _rust_soul(sections: list[dict], created_at: int) -> Event:
    """A plain (unencrypted) kind 31120 built and signed by rust-nostr with the agent's key."""
    keys = nostr_sdk.Keys.parse(AGENT_KEY.secret_hex())
    document = json.dumps({"format": "didactyl-soul/1", "sections": sections})
    builder = (nostr_sdk.EventBuilder(nostr_sdk.Kind(SOUL), document)
               .tags([nostr_sdk.Tag.parse(["d", "soul"]), nostr_sdk.Tag.parse(["app", "didactyl"])])
               .custom_created_at(nostr_sdk.Timestamp.from_secs(created_at)))
    return Event.from_json(builder.finalize(keys).as_json())


async def test_soul_publish_then_a_newer_soul_from_rust_nostr_changes_the_prompt(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    env = cli_env(tmp_path, CONFIG.format(url=rust_relay.url), DIDACTYL_NSEC=AGENT_KEY.nsec(),
                  DIDACTYL_MODEL="openai/some-model")
    published = didactyl(env, "soul", "publish", "--json")
    assert published.returncode == 0, published.stderr
    first = json.loads(published.stdout)
    assert first["encrypted"] and first["accepted_by"] == [rust_relay.url]
    shown = json.loads(didactyl(env, "soul", "show", "--json").stdout)
    assert shown["event_id"] == first["event_id"]
    assert [s["section"] for s in shown["soul"]["sections"]] == ["persona", "agent_identity"]
    prompt = json.loads(didactyl(env, "prompt", "--json").stdout)
    assert prompt["sections"][0]["content"] == "You are Config Didactyl."

    newer = _rust_soul([{"section": "persona", "content": "You are Relay Didactyl."},
                        {"section": "agent_npub", "tool": "my_npub"}], created_at=first["created_at"] + 10)
    async with RelayPool([rust_relay.url], **fast_client_kwargs()) as pool:
        assert (await pool.publish(newer, timeout=3)).any_accepted
    prompt = json.loads(didactyl(env, "prompt", "--json").stdout)
    assert [(s["section"], s["content"]) for s in prompt["sections"]] == [
        ("persona", "You are Relay Didactyl."), ("agent_npub", AGENT_KEY.npub)]
    shown = json.loads(didactyl(env, "soul", "show", "--json").stdout)
    assert shown["event_id"] == newer.id and not shown["encrypted"]
    history = json.loads(didactyl(env, "soul", "history", "--json").stdout)["versions"]
    rows = [(v["event_id"], v["origin"], v["current"], v["problem"]) for v in history]
    assert rows[0] == (newer.id, "remote", True, None)
    # Older: ours (the start of `soul publish` published the configured soul too: none was on the relay).
    assert (first["event_id"], "local", False, None) in rows[1:]
    assert {r[1] for r in rows[1:]} == {"local"} and not any(r[2] for r in rows[1:])
    shown = json.loads(didactyl(env, "soul", "show", "--version", first["event_id"][:8], "--json").stdout)
    assert [s["section"] for s in json.loads(shown["content"])["sections"]] == ["persona", "agent_identity"]


def test_soul_edit_publishes_a_changed_soul_and_keeps_a_refused_edit(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nsed -i "s/$FROM/$TO/" "$1"\n')
    editor.chmod(0o700)
    env = cli_env(tmp_path, CONFIG.format(url=rust_relay.url), DIDACTYL_NSEC=AGENT_KEY.nsec(),
                  DIDACTYL_MODEL="openai/some-model", EDITOR=str(editor), FROM="Config", TO="Edited")
    edited = didactyl(env, "soul", "edit")
    assert edited.returncode == 0, edited.stderr
    prompt = json.loads(didactyl(env, "prompt", "--json").stdout)
    assert prompt["sections"][0]["content"] == "You are Edited Didactyl."
    bad = didactyl({**env, "FROM": '"tool": "agent_identity"', "TO": '"tool": "no_such_tool"'}, "soul", "edit")
    line = one_line(bad.stderr)
    assert bad.returncode == 2 and "agent_identity" in line and "no_such_tool" in line
    kept = Path(line.rsplit("your edit is kept in ", 1)[1].rstrip(")"))
    assert "no_such_tool" in kept.read_text() and oct(kept.stat().st_mode & 0o777) == "0o600"
    unchanged = didactyl({**env, "FROM": "nothing-matches", "TO": "x"}, "soul", "edit")
    assert unchanged.returncode == 0 and "unchanged" in unchanged.stderr


def test_a_soul_naming_an_unknown_tool_is_refused_with_the_section_name(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    env = cli_env(tmp_path, CONFIG.format(url=rust_relay.url), DIDACTYL_NSEC=AGENT_KEY.nsec())
    bad = tmp_path / "bad-soul.json"
    bad.write_text(json.dumps({"format": "didactyl-soul/1", "sections": [
        {"section": "persona", "content": "hi"}, {"section": "weather_report", "tool": "get_weather"}]}))
    refused = didactyl(env, "soul", "publish", "--file", str(bad))
    line = one_line(refused.stderr)
    assert refused.returncode == 2 and "weather_report" in line and "get_weather" in line
    # Nothing was published: the start published the configured soul only (none was on the relay).
    deadline = time.monotonic() + 10
    shown = json.loads(didactyl(env, "soul", "show", "--json").stdout)
    while shown["event_id"] is None and time.monotonic() < deadline:
        shown = json.loads(didactyl(env, "soul", "show", "--json").stdout)
    assert [s["section"] for s in shown["soul"]["sections"]] == ["persona", "agent_identity"]
