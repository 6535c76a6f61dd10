"""The Nostr memory store against real relays: save, load, limits, newest wins, hostile and foreign events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_support import AGENT_KEY, LIMITS, OTHER_KEY, make_saves, make_store, memory_event, wait_for
from relay_servers import RustRelayUnderTest, fast_client_kwargs

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.saving import DocumentSaves
from didactyl_tui.agent.documents.store import DocumentStore
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.pool import RelayPool

ST, LT = DocumentKey.SHORT_TERM, DocumentKey.LONG_TERM


@pytest.fixture
async def pools() -> AsyncIterator[list[RelayPool]]:
    made: list[RelayPool] = []
    yield made
    for p in made:
        await p.close()


async def new_pool(pools: list[RelayPool], *urls: str) -> RelayPool:
    pool = RelayPool(urls, **fast_client_kwargs())
    await pool.start()
    pools.append(pool)
    return pool


def saving(store: DocumentStore, pool: RelayPool, tmp_path: Path, **options: Any) -> DocumentSaves:
    """The one save path over ``store`` (its outbox and history in ``tmp_path``)."""
    return make_saves(store, pool, tmp_path / "documents", **options)


async def stored(pool: RelayPool, d: str, author: str = AGENT_KEY.public_key_hex):
    """What the relay holds, read by a separate client (not through the store)."""
    return await pool.query([{"authors": [author], "kinds": [30078], "#d": [d]}], timeout=2)


async def test_save_publishes_encrypted_kind_30078_that_a_fresh_store_reads_back(relay, pools, tmp_path: Path) -> None:
    pool = await new_pool(pools, relay.url)
    store = make_store(AGENT_KEY, pool, limits=LIMITS)
    saves = saving(store, pool, tmp_path)
    result = await saves.save(ST, "Admin prefers short answers.")
    assert result.any_accepted and result.outcome.accepted_by == [relay.url]
    snap = store.snapshot(ST)
    assert snap.content == "Admin prefers short answers." and snap.event_id == result.event_id
    assert snap.relays == (relay.url,)

    [ev] = await stored(await new_pool(pools, relay.url), "short_term_memory")
    assert ev.id == result.event_id and ev.is_valid()
    assert ("app", "didactyl") in ev.tags and ev.d_tag == "short_term_memory"
    assert "Admin" not in ev.content  # encrypted, to ourselves
    conv = nip44.get_conversation_key(AGENT_KEY.secret_hex(), AGENT_KEY.public_key_hex)
    assert nip44.decrypt(ev.content, conv) == "Admin prefers short answers."

    fresh = make_store(AGENT_KEY, await new_pool(pools, relay.url), limits=LIMITS)
    loaded = await fresh.load()
    assert loaded[ST].content == "Admin prefers short answers." and loaded[ST].loaded
    assert loaded[LT].content == "" and loaded[LT].loaded and loaded[LT].event_id is None


async def test_over_the_limit_or_bad_type_raises_and_publishes_nothing(relay, pools, tmp_path: Path) -> None:
    pool = await new_pool(pools, relay.url)
    store = make_store(AGENT_KEY, pool, limits={ST: 10, LT: 70_000})
    saves = saving(store, pool, tmp_path)
    with pytest.raises(AgentError, match="limit is 10"):
        await saves.save(ST, "x" * 11)
    # Under the character limit but over NIP-44's 65,535 UTF-8 bytes.
    with pytest.raises(AgentError, match="65,535"):
        await saves.save(LT, "é" * 33_000)
    with pytest.raises(AgentError, match="short_term"):  # a name is parsed at the edges (tools, CLI, views)
        DocumentKey.parse("medium_term")
    reader = await new_pool(pools, relay.url)
    assert await stored(reader, "short_term_memory") == []
    assert await stored(reader, "long_term_memory") == []
    assert store.snapshot(ST).event_id is None  # the cache was not touched either


async def test_a_quick_second_save_is_strictly_newer_and_wins_on_the_relay(relay, pools, tmp_path: Path) -> None:
    frozen = float(int(time.time()))
    pool = await new_pool(pools, relay.url)
    store = make_store(AGENT_KEY, pool, limits=LIMITS, clock=lambda: frozen)
    saves = saving(store, pool, tmp_path, clock=lambda: frozen)
    first = await saves.save(ST, "one")
    second = await saves.save(ST, "two")
    assert second.created_at == first.created_at + 1  # the clock did not move: bumped by one
    assert second.outcome.any_accepted
    [ev] = await stored(await new_pool(pools, relay.url), "short_term_memory")
    assert ev.id == second.event_id


async def test_concurrent_saves_are_serialized(relay, pools, tmp_path: Path) -> None:
    pool = await new_pool(pools, relay.url)
    store = make_store(AGENT_KEY, pool, limits=LIMITS)
    saves = saving(store, pool, tmp_path)
    results = await asyncio.gather(*(saves.save(LT, f"version {n}") for n in range(5)))
    stamps = [r.created_at for r in results]
    assert stamps == sorted(stamps) and len(set(stamps)) == 5
    assert all(r.any_accepted for r in results)
    assert store.snapshot(LT).content == "version 4"
    [ev] = await stored(await new_pool(pools, relay.url), "long_term_memory")
    assert ev.id == results[-1].event_id


async def test_newer_version_from_another_device_updates_cache_and_notifies(relay, pools, tmp_path: Path) -> None:
    pool = await new_pool(pools, relay.url)
    store = make_store(AGENT_KEY, pool, limits=LIMITS)
    saves = saving(store, pool, tmp_path)
    await store.load()
    store.start_live()
    seen: list[tuple[str, str]] = []
    store.add_listener(lambda snap, origin: seen.append((snap.content, origin)))
    mine = await saves.save(ST, "mine")
    # The other device: its own connection, same key, publishing directly.
    other_device = await new_pool(pools, relay.url)
    newer = memory_event(AGENT_KEY, "from the phone", mine.created_at + 5)
    assert (await other_device.publish(newer, timeout=2)).any_accepted
    await wait_for(lambda: store.snapshot(ST).content == "from the phone")
    assert store.snapshot(ST).event_id == newer.id
    assert ("mine", "local") in seen and ("from the phone", "remote") in seen
    # An older version arriving later changes nothing.
    older = memory_event(AGENT_KEY, "stale", mine.created_at - 100)
    await store.take(relay.url, older)
    assert store.snapshot(ST).content == "from the phone"
    await store.stop_live()


async def test_foreign_author_wrong_d_future_and_forged_events_are_ignored(relay, pools, tmp_path: Path) -> None:
    pool = await new_pool(pools, relay.url)
    now = int(time.time())
    # A stranger's event with our d tag, on the relay before we start.
    stranger = memory_event(OTHER_KEY, "I am not you", now + 10, encrypt_to=OTHER_KEY)
    assert (await pool.publish(stranger, timeout=2)).any_accepted
    store = make_store(AGENT_KEY, pool, limits=LIMITS)
    saves = saving(store, pool, tmp_path)
    assert (await store.load())[ST].content == ""
    await saves.save(ST, "real")
    assert not await store.take(relay.url, stranger)
    assert not await store.take(relay.url, memory_event(AGENT_KEY, "x", now + 20, d="other_memory"))
    assert not await store.take(relay.url, memory_event(AGENT_KEY, "x", now + 3600))  # > 15 min ahead
    assert not await store.take(relay.url, memory_event(AGENT_KEY, "x", now + 20, kind=30079))
    good = memory_event(AGENT_KEY, "x", now + 30)
    forged = type(good)(good.id, good.pubkey, good.created_at, good.kind, good.tags, good.content, "00" * 64)
    assert not await store.take(relay.url, forged)
    assert store.snapshot(ST).content == "real"
    # (The relay never served the stranger's event to our authors filter: only the direct ingest counts.)
    assert store.dropped == {"foreign_author": 1, "wrong_d": 1, "future": 1, "wrong_kind": 1, "invalid": 1}


async def test_undecryptable_memory_gives_a_warning_and_blank_never_a_crash(relay, pools, tmp_path: Path) -> None:
    pool = await new_pool(pools, relay.url)
    now = int(time.time())
    # Signed with our key, but encrypted to someone else: we cannot read it.
    unreadable = memory_event(AGENT_KEY, "secret", now - 10, encrypt_to=OTHER_KEY)
    assert (await pool.publish(unreadable, timeout=2)).any_accepted
    store = make_store(AGENT_KEY, pool, limits=LIMITS)
    saves = saving(store, pool, tmp_path)
    warnings: list[str] = []
    store.add_warning_listener(warnings.append)
    snap = (await store.load())[ST]
    assert snap.content == "" and snap.loaded and snap.event_id is None
    assert warnings and "does not decrypt" in warnings[0]
    # Saving afterwards is strictly newer than the unreadable version, so relays take it.
    result = await saves.save(ST, "fresh start")
    assert result.created_at > unreadable.created_at and result.any_accepted
    # Live: undecryptable content never replaces a readable memory.
    assert not await store.take(relay.url, memory_event(AGENT_KEY, "x", result.created_at + 5, encrypt_to=OTHER_KEY))
    assert store.snapshot(ST).content == "fresh start"


async def test_empty_memory_round_trips(relay, pools, tmp_path: Path) -> None:
    pool = await new_pool(pools, relay.url)
    store = make_store(AGENT_KEY, pool, limits=LIMITS)
    saves = saving(store, pool, tmp_path)
    await saves.save(LT, "something")
    result = await saves.save(LT, "")
    assert result.any_accepted
    fresh = make_store(AGENT_KEY, await new_pool(pools, relay.url), limits=LIMITS)
    snap = (await fresh.load([LT]))[LT]
    assert snap.content == "" and snap.event_id == result.event_id


async def test_no_relay_answering_keeps_the_save_local_and_reports_each_relay(pools, tmp_path: Path) -> None:
    from relay_servers import free_port

    dead = f"ws://127.0.0.1:{free_port()}"
    pool = await new_pool(pools, dead)
    store = make_store(AGENT_KEY, pool, limits=LIMITS, relay_timeout=0.5)
    saves = saving(store, pool, tmp_path, timeout=0.5)
    assert not (await store.load())[ST].loaded  # no relay answered
    result = await saves.save(ST, "kept")
    assert not result.any_accepted and list(result.outcome.results) == [dead]
    assert store.snapshot(ST).content == "kept" and store.snapshot(ST).relays == ()


async def test_round_trip_on_rust_nostr_relay_and_our_relay_together(relay, pools, tmp_path: Path) -> None:
    rust = RustRelayUnderTest()
    await rust.start()
    try:
        pool = await new_pool(pools, relay.url, rust.url)
        store = make_store(AGENT_KEY, pool, limits=LIMITS)
        saves = saving(store, pool, tmp_path)
        result = await saves.save(LT, "long-term knowledge ✓")
        assert sorted(result.outcome.accepted_by) == sorted([relay.url, rust.url])
        only_rust = make_store(AGENT_KEY, await new_pool(pools, rust.url), limits=LIMITS)
        snap = (await only_rust.load([LT]))[LT]
        assert snap.content == "long-term knowledge ✓" and snap.relays == (rust.url,)
        assert only_rust.relay_versions(LT) == {rust.url: (result.event_id, result.created_at)}
    finally:
        await rust.stop()
