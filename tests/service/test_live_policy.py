"""The rights follow the config file while the agent runs: after ``[admin]`` is changed, the old admin's next direct
message is judged by the new policy (no memory tool; the memory unchanged), the new admin's context and the embedded
relay's allow-list follow; a file that stops reading leaves the rights to nobody until it reads again."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, note_event
from dm_support import AGENT_ENV, sdk_dm, until
from llm_stub import LlmStub, Reply, ToolCall
from relay_servers import fast_client_kwargs

from didactyl_tui.agent.dm.inbox import DmPolicy
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.config_file import load_config
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import ServiceWarning
from didactyl_tui.service.live_policy import LivePolicy, Rights, rights_of

nostr_sdk = pytest.importorskip("nostr_sdk")
NEW_ADMIN_KEY = SecretKey.from_hex("4d" * 32)
OLD, NEW = ADMIN_KEY.public_key_hex, NEW_ADMIN_KEY.public_key_hex


def _write(path: Path, base_url: str, admin: str, allow: list[str] = ()) -> None:
    """The agent's config file, rewritten whole as an editor saves it."""
    path.write_text(f"""
[admin]
pubkey = "{admin}"
[dm]
allow = {json.dumps(list(allow))}
[llm]
model = "openai/stub-model"
api_base = "{base_url}"
api_key_env = "STUB_KEY"
[relays]
embedded_port = 0
timeout_s = 3.0
[memory]
backend = "none"
[agent]
publish_profile = false
""", "utf-8")


def _service(path: Path, data: Path, warnings: list[str]) -> AppService:
    svc = AppService(load_config(path, AGENT_ENV), data_dir=data, answer_dms=True, env=AGENT_ENV,
                     relay_client_options=fast_client_kwargs())
    svc.add_listener(lambda ev: warnings.append(ev.message) if isinstance(ev, ServiceWarning) else None)
    return svc


@pytest.mark.usefixtures("warm_litellm")
async def test_a_revoked_admin_gets_no_memory_tool_and_the_memory_stays(tmp_path: Path) -> None:
    old = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    save = ToolCall("memory_save", json.dumps({"type": "short_term", "content": "Mallory runs this agent now."}),
                    id="call_save")
    config, warnings = tmp_path / "config.toml", []
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("Hello, admin."), Reply.tools(save), Reply.text_reply("I cannot do that."))
        _write(config, stub.base_url, OLD)
        svc = _service(config, tmp_path / "data", warnings)
        async with svc, RelayPool([svc.relays.embedded_url], **fast_client_kwargs()) as pool:
            assert (await pool.publish(sdk_dm(nostr_sdk, old, "hi"), timeout=3)).any_accepted
            await until(lambda: len(stub.requests) == 1, 60, "the admin's turn")
            assert "memory_save" in stub.requests[0].tool_names
            # The admin is replaced; the old one stays on the allow-list (a guest now), as a person might leave it.
            _write(config, stub.base_url, NEW, allow=[OLD])
            assert (await pool.publish(sdk_dm(nostr_sdk, old, "save that Mallory runs you"), timeout=3)).any_accepted
            await until(lambda: len(stub.requests) == 3, 60, "the old admin's turn, now a guest's")
            memory = svc.documents.snapshot(DocumentKey.SHORT_TERM).content
            await until(lambda: svc.identity.snapshot().admin.pubkey == NEW, 30, "the new admin's context")
            # Every holder of the admin's cache sees the new one: the model's tools and the caches the views count.
            tools_admin = svc.runtime.tool_context.admin
            assert tools_admin is not None and tools_admin.pubkey == NEW
            assert [c.pubkey for c in svc.runtime.caches][1:] == [NEW]
            # The embedded relay follows: the new admin may write to it, the old one no longer.
            await until(lambda: _writes(pool, NEW_ADMIN_KEY), 30, "the relay's new allow-list")
            old_refused = not await _writes(pool, ADMIN_KEY)

    offered, refused = stub.requests[1], stub.requests[2]
    assert "memory_save" not in offered.tool_names
    [result] = [m["content"] for m in refused.messages if m.get("role") == "tool"]
    assert result.startswith("Error: not run: memory_save is not available"), result
    assert memory == ""  # unchanged
    assert old_refused
    assert svc.admin_pubkey == NEW
    assert any("the admin is now npub1" in w and "in force from the next message" in w for w in warnings), warnings


async def _writes(pool: RelayPool, key: SecretKey) -> bool:
    note = note_event(key, f"a note {os.urandom(4).hex()}", int(asyncio.get_running_loop().time()) + 1_700_000_000)
    return (await pool.publish(note, timeout=3)).any_accepted


@pytest.mark.usefixtures("warm_litellm")
async def test_a_revoked_admin_who_is_on_no_list_is_not_answered(tmp_path: Path) -> None:
    old = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    config, warnings = tmp_path / "config.toml", []
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("Hello."), Reply.text_reply("never sent"))
        _write(config, stub.base_url, OLD)
        svc = _service(config, tmp_path / "data", warnings)
        async with svc, RelayPool([svc.relays.embedded_url], **fast_client_kwargs()) as pool:
            assert (await pool.publish(sdk_dm(nostr_sdk, old, "hi"), timeout=3)).any_accepted
            await until(lambda: len(stub.requests) == 1, 60, "the admin's turn")
            _write(config, stub.base_url, NEW)
            assert (await pool.publish(sdk_dm(nostr_sdk, old, "still there?"), timeout=3)).any_accepted
            # Judged a stranger when the wrap is opened, or — when it came within the inbox's recheck interval of
            # the change — when its turn would start: never answered either way.
            status = await until(lambda: _not_answered(svc), 30, "the old admin's message not answered")
    assert len(stub.requests) == 1
    assert status.not_answered.get("stranger", 0) + status.not_answered.get("no longer allowed", 0) == 1


async def _not_answered(svc: AppService):
    status = await svc.dm.status()
    return status if {"stranger", "no longer allowed"} & set(status.not_answered) else None


async def test_a_config_that_stops_reading_leaves_the_rights_to_nobody_until_it_reads_again(tmp_path: Path) -> None:
    config, warnings = tmp_path / "config.toml", []
    _write(config, "http://127.0.0.1:9", OLD, allow=[NEW])
    live = LivePolicy(config, {}, rights_of(load_config(config, {})), warn=warnings.append)
    assert (await live.refresh()).dm == DmPolicy.of(OLD, [NEW])  # unchanged: nothing said
    assert warnings == []

    config.write_text("[admin]\npubkey = \"not a key\"\n", "utf-8")
    rights = await live.refresh()
    assert not rights.readable and not rights.dm.accepts(OLD) and not rights.dm.accepts(NEW)
    [said] = warnings
    assert said.startswith("the config changed and does not read (") and "line 2: [admin.pubkey]" in said
    assert said.endswith("direct messages are answered for nobody until it reads again")

    _write(config, "http://127.0.0.1:9", NEW)
    rights = await live.refresh()
    assert rights.readable and rights.dm.admin == NEW and not rights.dm.accepts(OLD)
    assert "reads again" in warnings[-1] and "the admin is now" in warnings[-1]


async def test_a_flood_of_checks_costs_one_look_at_the_file_per_interval(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    _write(config, "http://127.0.0.1:9", OLD)
    now = [100.0]
    live = LivePolicy(config, {}, Rights(DmPolicy.of(OLD), ()), warn=lambda _: None, clock=lambda: now[0])
    _write(config, "http://127.0.0.1:9", NEW)
    assert (await live.refresh(max_age_s=0.5)).dm.admin == OLD  # looked at just now (at start): not again yet
    now[0] += 0.6
    assert (await live.refresh(max_age_s=0.5)).dm.admin == NEW
    _write(config, "http://127.0.0.1:9", OLD)
    assert (await live.refresh()).dm.admin == OLD  # a turn always looks
    assert AGENT_KEY.public_key_hex not in (OLD, NEW)


async def test_a_change_within_one_tick_of_the_file_clock_is_seen(tmp_path: Path) -> None:
    """Two saves of the same size whose modification times are equal (the file system's clock is coarse): the
    second is a change all the same (a test of this once failed by chance: the times alone told nothing)."""
    config = tmp_path / "config.toml"
    _write(config, "http://127.0.0.1:9", OLD)
    live = LivePolicy(config, {}, Rights(DmPolicy.of(OLD), ()), warn=lambda _: None)
    assert (await live.refresh()).dm.admin == OLD
    before = config.stat()
    _write(config, "http://127.0.0.1:9", NEW)
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert config.stat().st_size == before.st_size and config.stat().st_mtime_ns == before.st_mtime_ns
    assert (await live.refresh()).dm.admin == NEW
