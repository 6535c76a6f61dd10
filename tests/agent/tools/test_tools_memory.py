"""Memory tools through the registry, as the model calls them, against a real relay."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_support import AGENT_KEY, LIMITS, make_saves, make_store
from memory_support import text_of
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
    store = make_store(AGENT_KEY, pool, limits={**LIMITS, DocumentKey.SHORT_TERM: 20})
    ctx = AgentToolContext(
        memory=store,
        saves=make_saves(store, pool, tmp_path / "documents"),
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


async def texts_on_relay(reader: RelayPool, d: str) -> list[str]:
    return [text_of(ev) for ev in await on_relay(reader, d)]


async def test_memory_insert_adds_lines_and_leaves_the_rest_as_it_was(setup) -> None:
    ctx, url, reader = setup
    registry = build_base_registry()
    old = "# Ada\n\n- likes tea\n- lives in Lyon"  # no final line break
    await registry.call("memory_save", {"type": "long_term", "content": old}, ctx)

    at_end = await registry.call("memory_insert", {"type": "long_term", "new_str": "- plays go"}, ctx)
    assert not at_end.is_error, at_end.content
    result = json.loads(at_end.content)
    assert result["accepted_by"] == [url] and result["chars"] == len(old) + 11
    assert await texts_on_relay(reader, "long_term_memory") == [old + "\n- plays go"]
    assert result["diff"].splitlines()[2:] == ["@@ -4 +4,2 @@", " - lives in Lyon", "+- plays go"]

    await registry.call("memory_insert", {"type": "long_term", "new_str": "Summary: a friend", "insert_line": 0}, ctx)
    await registry.call("memory_insert", {"type": "long_term", "new_str": "- reads\n- writes", "insert_line": 4},
                        ctx)
    assert await texts_on_relay(reader, "long_term_memory") == [
        "Summary: a friend\n# Ada\n\n- likes tea\n- reads\n- writes\n- lives in Lyon\n- plays go"]


async def test_memory_insert_into_a_text_ending_with_a_line_break_keeps_it(setup) -> None:
    ctx, _url, reader = setup
    registry = build_base_registry()
    await registry.call("memory_save", {"type": "short_term", "content": "todo:\n"}, ctx)
    await registry.call("memory_insert", {"type": "short_term", "new_str": "- tea"}, ctx)
    assert await texts_on_relay(reader, "short_term_memory") == ["todo:\n- tea\n"]


async def test_memory_replace_changes_the_one_passage_and_refuses_a_doubtful_one(setup) -> None:
    ctx, url, reader = setup
    registry = build_base_registry()
    await registry.call("memory_save", {"type": "long_term", "content": "Ada likes tea.\nBob likes tea."}, ctx)

    twice = await registry.call("memory_replace", {"type": "long_term", "old_str": "likes tea", "new_str": "x"}, ctx)
    assert twice.is_error and "occurs 2 times" in twice.content and "nothing was changed" in twice.content
    missing = await registry.call("memory_replace", {"type": "long_term", "old_str": "Ada likes coffee",
                                                     "new_str": "x"}, ctx)
    assert missing.is_error and "was not found" in missing.content and "nothing was changed" in missing.content
    assert await texts_on_relay(reader, "long_term_memory") == ["Ada likes tea.\nBob likes tea."]

    done = await registry.call("memory_replace", {"type": "long_term", "old_str": "Bob likes tea",
                                                  "new_str": "Bob likes coffee"}, ctx)
    assert not done.is_error, done.content
    result = json.loads(done.content)
    assert result["accepted_by"] == [url]
    assert result["diff"].splitlines()[2:] == ["@@ -1,2 +1,2 @@", " Ada likes tea.", "-Bob likes tea.",
                                               "+Bob likes coffee."]
    deleted = await registry.call("memory_replace", {"type": "long_term", "old_str": "\nBob likes coffee.",
                                                     "new_str": ""}, ctx)
    assert not deleted.is_error, deleted.content
    assert await texts_on_relay(reader, "long_term_memory") == ["Ada likes tea."]


async def test_partial_edits_are_held_to_the_limit_and_a_bad_place_publishes_nothing(setup) -> None:
    ctx, _url, reader = setup
    registry = build_base_registry()
    await registry.call("memory_save", {"type": "short_term", "content": "a\nb"}, ctx)
    before = await on_relay(reader, "short_term_memory")
    over = await registry.call("memory_insert", {"type": "short_term", "new_str": "x" * 18}, ctx)
    assert over.is_error and "limit is 20" in over.content and "nothing was published" in over.content
    far = await registry.call("memory_insert", {"type": "short_term", "new_str": "c", "insert_line": 3}, ctx)
    assert far.is_error and "has 2 lines" in far.content and "-1 for the end" in far.content
    grown = await registry.call("memory_replace", {"type": "short_term", "old_str": "b", "new_str": "y" * 19}, ctx)
    assert grown.is_error and "limit is 20" in grown.content
    assert [ev.id for ev in await on_relay(reader, "short_term_memory")] == [ev.id for ev in before]
    assert ctx.memory.snapshot(DocumentKey.SHORT_TERM).content == "a\nb"


async def test_a_partial_edit_of_a_memory_not_read_yet_reads_it_first(setup, tmp_path: Path) -> None:
    ctx, _url, reader = setup
    registry = build_base_registry()
    await registry.call("memory_save", {"type": "long_term", "content": "kept line"}, ctx)
    store = make_store(AGENT_KEY, reader)
    fresh = AgentToolContext(memory=store, saves=make_saves(store, reader, tmp_path / "documents2"), agent=ctx.agent,
                             admin=None, files_root=tmp_path / "memory2")
    assert not fresh.memory.snapshot(DocumentKey.LONG_TERM).loaded
    added = await registry.call("memory_insert", {"type": "long_term", "new_str": "new line"}, fresh)
    assert not added.is_error, added.content
    assert await texts_on_relay(reader, "long_term_memory") == ["kept line\nnew line"]
