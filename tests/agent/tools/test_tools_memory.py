"""Memory tools through the registry, as the model calls them, against a real relay."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_support import AGENT_KEY, LIMITS, make_store
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.identity.cache import IdentityCache
from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.context import AgentToolContext
from didactyl_tui.nostr.pool import RelayPool


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[AgentToolContext, str, RelayPool]]:
    relay = EmbeddedRelayUnderTest(tmp_path / "relay.db")
    await relay.start()
    pool = RelayPool([relay.url], **fast_client_kwargs())
    reader = RelayPool([relay.url], **fast_client_kwargs())
    await pool.start()
    await reader.start()
    ctx = AgentToolContext(
        memory=make_store(AGENT_KEY, pool, limits={**LIMITS, DocumentKey.SHORT_TERM: 20}),
        agent=IdentityCache(AGENT_KEY.public_key_hex),
        admin=None,
        files_root=tmp_path / "memory",
    )
    yield ctx, relay.url, reader
    await pool.close()
    await reader.close()
    await relay.stop()


async def on_relay(reader: RelayPool, d: str) -> list:
    return await reader.query([{"authors": [AGENT_KEY.public_key_hex], "kinds": [30078], "#d": [d]}], timeout=2)


async def test_memory_save_then_my_memory_returns_it(setup) -> None:
    ctx, url, reader = setup
    registry = build_base_registry()
    empty = await registry.call("my_memory", "{}", ctx)
    assert not empty.is_error and json.loads(empty.content)["content"] == ""

    saved = await registry.call("memory_save", json.dumps({"type": "long_term", "content": "Ada likes tea."}), ctx)
    assert not saved.is_error, saved.content
    result = json.loads(saved.content)
    assert result["accepted_by"] == [url] and result["relays"][url]["verdict"] == "accepted"
    assert result["type"] == "long_term" and result["chars"] == 14 and result["limit_chars"] == 32000
    [ev] = await on_relay(reader, "long_term_memory")
    assert ev.id == result["event_id"]

    read = await registry.call("my_memory", None, ctx)
    assert json.loads(read.content)["content"] == "## Long-Term Memory\n\nAda likes tea.\n\n(14/32,000 chars used)"


async def test_bad_calls_are_readable_errors_and_publish_nothing(setup) -> None:
    ctx, _url, reader = setup
    registry = build_base_registry()
    over = await registry.call("memory_save", {"type": "short_term", "content": "x" * 21}, ctx)
    assert over.is_error and "limit is 20" in over.content and "nothing was published" in over.content
    bad_type = await registry.call("memory_save", {"type": "medium", "content": "x"}, ctx)
    assert bad_type.is_error and "short_term" in bad_type.content
    missing = await registry.call("memory_save", '{"type": "short_term"}', ctx)
    assert missing.is_error and "content" in missing.content
    assert await on_relay(reader, "short_term_memory") == []


async def test_short_term_read_is_internal_only(setup) -> None:
    ctx, _url, _reader = setup
    registry = build_base_registry()
    await registry.call("memory_save", {"type": "short_term", "content": "todo: tea"}, ctx)
    from_model = await registry.call("memory_short_term_read", "{}", ctx)
    assert from_model.is_error and "there is no tool" in from_model.content
    internal = await registry.call("memory_short_term_read", "{}", ctx, internal=True)
    assert json.loads(internal.content)["content"] == "## Short-Term Memory\n\ntodo: tea\n\n(9/20 chars used)"
