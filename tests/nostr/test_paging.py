"""Reading stored events back page by page (nostr/paging.py), against our relay: each relay on its own cursor, past a
flood of newer events, through a crowded second, and ended by its bounds (pages, bytes, time)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from relay_servers import ScriptedConnection, ScriptedRelay, fast_client_kwargs

from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.paging import BYTES, COMPLETE, NO_BOUND, PAGES, TIME, Page, PageBounds, PagedRead
from didactyl_tui.nostr.pool import RelayPool

NOW = 1_750_000_000
FLOODER = SecretKey.from_hex("51" * 32)
FILTER = {"kinds": [1]}


def _notes(count: int, *, at: int, per_second: int = 1, text: str = "flood") -> list[Event]:
    """``count`` kind-1 notes, ``per_second`` in each second counting down from ``at``."""
    return [sign_event(FLOODER, kind=1, content=f"{text} {i}", created_at=at - i // per_second) for i in range(count)]


async def _store(url: str, events: list[Event]) -> None:
    async with RelayPool([url], **fast_client_kwargs()) as pool:
        assert await pool.wait_connected(5)
        outcomes = await asyncio.gather(*(pool.publish(ev, 10) for ev in events))
        assert all(o.any_accepted for o in outcomes), [o.summary() for o in outcomes if not o.any_accepted][:1]


async def _read_all(read: PagedRead) -> list[Page]:
    return [page async for page in read.pages()]


async def test_each_relay_is_read_back_on_its_own_cursor_past_a_flood_of_newer_events(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "a.sqlite3") as flooded, EmbeddedRelay(tmp_path / "b.sqlite3") as quiet:
        old_on_a = _notes(3, at=NOW - 86_400, text="old on a")
        old_on_b = _notes(2, at=NOW - 90_000, text="old on b")
        await _store(flooded.url, [*_notes(900, at=NOW, per_second=3), *old_on_a])
        await _store(quiet.url, old_on_b)
        async with RelayPool([flooded.url, quiet.url], **fast_client_kwargs()) as pool:
            await pool.wait_connected(5)
            read = PagedRead(pool, FILTER, PageBounds(page_size=100), query_timeout_s=5)
            pages = await _read_all(read)
    ids = [ev.id for page in pages for ev in page.events]
    assert len(ids) == len(set(ids)) == 905  # everything, each event once
    assert read.ended == COMPLETE and read.answered == {flooded.url, quiet.url}
    # The quiet relay's old events came with the first page: its cursor is its own, not the flooded relay's.
    assert {ev.id for ev in old_on_b} <= {ev.id for ev in pages[0].events}
    assert {ev.id for ev in old_on_a} <= set(ids)
    horizons = [page.horizon for page in pages]
    assert horizons[-1] is None
    assert all(h is not None for h in horizons[:-1])
    known = [h for h in horizons if h is not None]
    assert known == sorted(known, reverse=True)


async def test_a_second_holding_more_than_a_page_is_read_up_to_a_page_and_the_read_goes_on(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        crowded = _notes(250, at=NOW, per_second=250)
        older = _notes(5, at=NOW - 10, text="older")
        await _store(relay.url, [*crowded, *older])
        async with RelayPool([relay.url], **fast_client_kwargs()) as pool:
            await pool.wait_connected(5)
            read = PagedRead(pool, FILTER, PageBounds(page_size=100), query_timeout_s=5)
            got = {ev.id for page in await _read_all(read) for ev in page.events}
    assert read.ended == COMPLETE
    assert {ev.id for ev in older} <= got
    assert len(got & {ev.id for ev in crowded}) == 100  # the documented limit: one page of a crowded second


async def test_a_read_ends_at_its_page_and_byte_bounds(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        await _store(relay.url, _notes(600, at=NOW, per_second=2))
        async with RelayPool([relay.url], **fast_client_kwargs()) as pool:
            await pool.wait_connected(5)
            by_pages = PagedRead(pool, FILTER, PageBounds(page_size=100, max_pages=2), query_timeout_s=5)
            # Two pages of 100; the second asks again for the first one's oldest second (its two events).
            assert sum(len(page.events) for page in await _read_all(by_pages)) == 198
            assert by_pages.ended == PAGES
            by_bytes = PagedRead(pool, FILTER, PageBounds(page_size=100, max_bytes=150 * 400), query_timeout_s=5)
            read = sum(len(page.events) for page in await _read_all(by_bytes))
            assert by_bytes.ended == BYTES and 0 < read < 600 and by_bytes.bytes_read <= 150 * 400


async def test_a_relay_that_never_finishes_a_page_ends_the_read_at_its_time_bound() -> None:
    async def never_eose(conn: ScriptedConnection) -> None:
        await conn.recv_type("REQ")
        await conn.drain()

    async with ScriptedRelay(never_eose) as relay, RelayPool([relay.url], **fast_client_kwargs()) as pool:
        await pool.wait_connected(5)
        read = PagedRead(pool, FILTER, PageBounds(timeout_s=0.5), query_timeout_s=30)
        assert await _read_all(read) == [Page([], NO_BOUND)]  # nothing read: anything may still be unread
        assert read.ended == TIME and read.answered == set()
