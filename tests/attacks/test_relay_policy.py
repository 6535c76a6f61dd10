"""Attacks on the embedded relay's policy, over real sockets: cross-origin handshakes, strangers writing,
floods against the rate limits and the database quota, integers SQLite cannot hold, heavy filters.

Each test is bounded in count and time. The relay runs in this process here (these attacks are about
answers, not memory); tests/attacks/test_relay_resources.py measures a relay process from outside.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import websockets
from attacks.relay_process import raw_ws

from didactyl_tui.nostr.embedded_relay.limits import RelayLimits
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey

AGENT = SecretKey.from_hex("00" * 31 + "a1")
ADMIN = SecretKey.from_hex("00" * 31 + "a2")
STRANGER = SecretKey.from_hex("00" * 31 + "e1")
T0 = 1_700_000_000


def ev(key: SecretKey, content: str = "x", *, kind: int = 1, created_at: int = T0,
       tags: list[list[str]] | None = None) -> Event:
    return sign_event(key, kind=kind, content=content, created_at=created_at, tags=tags or [])


class Client:
    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws

    async def ask(self, message: Any) -> list[Any]:
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))
        return json.loads(await asyncio.wait_for(self.ws.recv(), 5))

    async def publish_all(self, events: list[Event]) -> list[list[Any]]:
        for e in events:
            await self.ws.send(json.dumps(["EVENT", e.to_dict()]))
        return [json.loads(await asyncio.wait_for(self.ws.recv(), 10)) for _ in events]


async def client(url: str) -> Client:
    return Client(await websockets.connect(url, max_size=None, compression=None, open_timeout=5))


def allow_listed(tmp_path: Path, **limits: Any) -> EmbeddedRelay:
    return EmbeddedRelay(tmp_path / "relay.sqlite3", limits=RelayLimits().replace(**limits),
                         allowed_writers=[AGENT.public_key_hex, ADMIN.public_key_hex],
                         gift_wrap_recipients=[AGENT.public_key_hex])


@pytest.mark.parametrize(("origin", "status"), [
    ("https://evil.example", 403),
    ("null", 403),  # sandboxed iframes and file:// pages
    ("http://127.0.0.1.evil.example", 403),
    ("http://localhost:3000", 101),
    ("http://127.0.0.1:8080", 101),
    (None, 101),  # not a browser
])
async def test_cross_origin_handshakes_are_refused(embedded_relay: EmbeddedRelay, origin: str | None,
                                                   status: int) -> None:
    sock, got = await asyncio.to_thread(raw_ws, embedded_relay.url, origin=origin)
    sock.close()
    assert got == status


async def test_strangers_are_blocked_but_gift_wraps_to_the_agent_get_through(tmp_path: Path) -> None:
    async with allow_listed(tmp_path) as relay:
        c = await client(relay.url)
        note = ev(STRANGER, "spam")
        answer = await c.ask(["EVENT", note.to_dict()])
        assert answer[:3] == ["OK", note.id, False] and answer[3].startswith("blocked: ")
        wrap_to_agent = ev(STRANGER, "sealed", kind=1059, tags=[["p", AGENT.public_key_hex]])
        assert await c.ask(["EVENT", wrap_to_agent.to_dict()]) == ["OK", wrap_to_agent.id, True, ""]
        wrap_to_other = ev(STRANGER, "sealed", kind=1059, tags=[["p", STRANGER.public_key_hex]])
        assert (await c.ask(["EVENT", wrap_to_other.to_dict()]))[3].startswith("blocked: ")
        ephemeral = ev(STRANGER, "typing", kind=20001)
        assert (await c.ask(["EVENT", ephemeral.to_dict()]))[3].startswith("blocked: ")
        for owner in (AGENT, ADMIN):
            mine = ev(owner, "memory", kind=30078, tags=[["d", "short_term_memory"]])
            assert await c.ask(["EVENT", mine.to_dict()]) == ["OK", mine.id, True, ""]
        # A forgery claiming the agent's key is refused for its signature, not stored.
        forged = ev(AGENT, "forged").to_dict() | {"sig": note.sig}
        answer = await c.ask(["EVENT", forged])
        assert answer[2] is False and answer[3] == "invalid: bad signature"
        assert await relay.count() == 3


async def test_a_stranger_flood_is_refused_and_cannot_grow_the_database_past_its_quota(tmp_path: Path) -> None:
    quota = 1024 * 1024
    async with allow_listed(tmp_path, max_db_bytes=quota) as relay:
        c = await client(relay.url)
        spam = [ev(STRANGER, f"spam {i} " + "s" * 4000, created_at=T0 + i) for i in range(300)]
        assert all(a[3].startswith("blocked: ") for a in await c.publish_all(spam))
        wraps = [ev(STRANGER, f"wrap {i} " + "w" * 8000, kind=1059, created_at=T0 + i,
                    tags=[["p", AGENT.public_key_hex]]) for i in range(300)]  # ~2.4 MB offered
        answers = await c.publish_all(wraps)
        stored = sum(a[2] is True for a in answers)
        refused = [a[3] for a in answers if a[2] is False]
        assert 0 < stored < len(wraps)
        assert refused and all(r == "error: the relay's storage quota is full" for r in refused)
        # Strangers stop at their share; the owner still has room to save its memory.
        assert await relay.used_bytes() <= quota * 0.75
        mine = ev(AGENT, "memory", kind=30078, tags=[["d", "short_term_memory"]])
        assert await c.ask(["EVENT", mine.to_dict()]) == ["OK", mine.id, True, ""]
    with sqlite3.connect(tmp_path / "relay.sqlite3") as db:
        pages, free, size = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count",
                                                                             "page_size"))
    assert (pages - free) * size <= quota


async def test_a_connection_over_its_event_rate_is_rate_limited(tmp_path: Path) -> None:
    async with allow_listed(tmp_path, events_per_second=5, events_burst=20) as relay:
        c = await client(relay.url)
        answers = await c.publish_all([ev(AGENT, f"n{i}", created_at=T0 + i) for i in range(60)])
        limited = [a[3] for a in answers if a[2] is False]
        assert 30 <= len(limited) <= 40  # 20 burst + a few refilled while the 60 arrive
        assert all(r.startswith("rate-limited: this connection sent more than 5 events per second") for r in limited)


@pytest.mark.parametrize("flt", [
    {"since": 2**63}, {"until": 2**64}, {"limit": 2**63}, {"kinds": [2**63]}, {"kinds": [-1]},
    {"kinds": [65536]}, {"since": -1}, {"limit": -5},
], ids=str)
async def test_integers_sqlite_cannot_hold_get_a_clear_closed(embedded_relay: EmbeddedRelay,
                                                              flt: dict[str, Any]) -> None:
    c = await client(embedded_relay.url)
    answer = await c.ask(["REQ", "s", flt])
    assert answer[:2] == ["CLOSED", "s"] and answer[2].startswith("invalid: filter ")
    assert await c.ask(["REQ", "t", {"kinds": [1], "since": 2**63 - 1}]) == ["EOSE", "t"]  # the edge is fine


async def test_an_event_dated_beyond_sqlite_is_refused(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "r.sqlite3", max_future_seconds=None) as relay:
        c = await client(relay.url)
        far = ev(AGENT, "far", created_at=2**63)
        assert await c.ask(["EVENT", far.to_dict()]) == ["OK", far.id, False, "invalid: created_at must be below 2^63"]
        ok = ev(AGENT, "ok")
        assert (await c.ask(["EVENT", ok.to_dict()]))[2] is True


async def test_heavy_filters_are_bounded_per_connection_and_for_the_relay(tmp_path: Path) -> None:
    authors = [f"{i:064x}" for i in range(1000)]
    async with EmbeddedRelay(tmp_path / "r.sqlite3",
                             limits=RelayLimits(max_filters_total=40)) as relay:
        conns = [await client(relay.url) for _ in range(12)]
        first = await conns[0].ask(["REQ", "a", *[{"authors": authors}] * 3])
        assert first == ["EOSE", "a"]
        over = await conns[0].ask(["REQ", "b", {"authors": authors}])
        assert over[:2] == ["CLOSED", "b"] and "more than 4000 filter values" in over[2]
        answers = [await c.ask(["REQ", "s", *[{"kinds": [1]}] * 16]) for c in conns[1:]]
        assert answers.count(["EOSE", "s"]) == 2  # 3 + 2 x 16 filters = 35 of the relay's 40
        assert all(a[2].startswith("error: the relay holds too many subscriptions") for a in answers[2:])
        for c in conns:
            await c.ws.close()
        # Closed connections give their share back.
        again = await client(relay.url)
        assert await again.ask(["REQ", "s", *[{"kinds": [1]}] * 16]) == ["EOSE", "s"]
