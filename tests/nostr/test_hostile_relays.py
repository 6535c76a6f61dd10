"""A relay that serves forged events changes nothing: each is dropped and counted (pool level).

Forgeries tried, against the filter a memory query uses (``authors`` = us, kind 30078, our ``d``):
bad signature, bad id, another author with the same ``d`` tag, wrong kind, ``created_at`` more than
15 minutes in the future, a malformed event, an unknown subscription, and content that is not valid
NIP-44. The first five are the pool's job and are dropped and counted there; content that does not
decrypt is signed by our own key, so only the memory store (which holds the key) can refuse it —
the test pins that the pool passes it on and that it does not decrypt.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from fault_relay import FaultProxy, HostileRelay, forged, with_bad_signature

from didactyl_tui.errors import Nip44Error
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool

SK = SecretKey.from_hex("09" * 32)
MALLORY = SecretKey.from_hex("0a" * 32)
D = "short_term_memory"
FILTER = {"authors": [SK.public_key_hex], "kinds": [30078], "#d": [D]}
FAST = {"backoff_base": 0.01, "backoff_max": 0.1, "connect_timeout": 1.0, "ping_interval": None}
CONVERSATION_KEY = nip44.get_conversation_key(SK.secret_hex(), SK.public_key_hex)


def memory_event(content: str, created_at: int, *, sk: SecretKey = SK, kind: int = 30078, d: str = D) -> Event:
    return sign_event(sk, kind=kind, content=content, created_at=created_at, tags=[["d", d], ["app", "didactyl"]])


def genuine(text: str, created_at: int) -> Event:
    return memory_event(nip44.encrypt(text, CONVERSATION_KEY), created_at)


def forgeries(real: Event, now: int) -> dict[str, dict | str]:
    """One forged version per attack, each 'newer' than the real one so it would win if trusted."""
    return {
        "invalid_sig": with_bad_signature(genuine("forged: bad signature", now - 10)),
        "invalid_id": forged(real, content=nip44.encrypt("forged: changed content", CONVERSATION_KEY),
                             created_at=now - 9),
        "other_author": memory_event("mallory's memory", now - 8, sk=MALLORY).to_dict(),
        "wrong_kind": memory_event(real.content, now - 7, kind=30079).to_dict(),
        "future": genuine("from the future", now + 16 * 60).to_dict(),
        "bad_event": {"id": "zz", "kind": "30078"},
    }


EXPECTED_DROPS = {
    "invalid_sig": 1,
    "invalid_id": 1,
    "filter_mismatch": 2,  # another author; wrong kind
    "future_created_at": 1,
    "bad_event": 1,
}


@pytest.fixture
async def relays(tmp_path: Path):
    async with EmbeddedRelay(tmp_path / "honest.sqlite3") as honest:
        yield honest


async def test_query_drops_and_counts_every_forgery(relays: EmbeddedRelay) -> None:
    now = int(time.time())
    real = genuine("the real memory", now - 60)
    fakes = forgeries(real, now)
    # forgeries first; a forged copy of the real id after the real one is ignored as a repeat
    late_copy = forged(real, content="tampered after the fact")
    async with HostileRelay([*fakes.values(), real.to_dict(), late_copy]) as hostile:
        pool = RelayPool([relays.url, hostile.url], **FAST)
        await pool.start()
        try:
            await pool.wait_connected(5.0)
            events = await pool.query([FILTER], timeout=3.0)
            assert events == [real]  # nothing forged got through; the real one did
            dropped = pool.dropped()
            assert {k: v for k, v in dropped[hostile.url].items() if v} == EXPECTED_DROPS
            assert sum(dropped[relays.url].values()) == 0  # the honest relay is not blamed
            assert nip44.decrypt(events[0].content, CONVERSATION_KEY) == "the real memory"
        finally:
            await pool.close()


async def test_forgeries_do_not_displace_the_real_newest_version(relays: EmbeddedRelay) -> None:
    now = int(time.time())
    older, real = genuine("older", now - 120), genuine("newest", now - 60)
    fakes = forgeries(real, now)
    async with HostileRelay([older.to_dict(), *fakes.values()]) as hostile:
        pool = RelayPool([relays.url, hostile.url], **FAST)
        await pool.start()
        try:
            await pool.wait_connected(5.0)
            assert (await pool.publish(real, timeout=3.0)).results[relays.url].accepted
            by_relay = await pool.query_by_relay([FILTER], timeout=3.0)
            assert by_relay[hostile.url] == [older]  # the hostile relay's only valid answer
            assert by_relay[relays.url] == [real]
            assert await pool.query([FILTER], timeout=3.0) == [real]  # newest wins across relays
        finally:
            await pool.close()


async def test_live_subscription_drops_forged_events_pushed_later(relays: EmbeddedRelay) -> None:
    """Forged events pushed on an open subscription by a proxy in front of an honest relay."""
    now = int(time.time())
    real = genuine("the real memory", now - 60)
    async with FaultProxy(relays.url) as proxy:
        pool = RelayPool([proxy.url], **FAST)
        await pool.start()
        got: list[Event] = []
        try:
            await pool.wait_connected(5.0)
            sub = pool.subscribe([FILTER], lambda url, ev: got.append(ev))
            for _ in range(200):
                if sub.eose_from:
                    break
                await asyncio.sleep(0.01)
            fakes = forgeries(real, now)
            assert await proxy.serve_events(list(fakes.values())) == len(fakes)
            assert (await pool.publish(real, timeout=3.0)).any_accepted
            for _ in range(200):
                if got and sum(pool.dropped()[proxy.url].values()) >= sum(EXPECTED_DROPS.values()):
                    break
                await asyncio.sleep(0.01)
            assert got == [real]
            assert {k: v for k, v in pool.dropped()[proxy.url].items() if v} == EXPECTED_DROPS
            await sub.close()
        finally:
            await pool.close()


async def test_junk_frames_and_unknown_subscriptions_are_counted(relays: EmbeddedRelay) -> None:
    real = genuine("x", int(time.time()) - 60)
    junk = [
        "not json",
        '["EVENT","some-sub-we-never-opened",' + real.to_json() + "]",
        '["EOSE"]',
        '["WHAT","is this"]',
    ]
    async with HostileRelay([*junk, real.to_dict()]) as hostile:
        pool = RelayPool([hostile.url], **FAST)
        await pool.start()
        try:
            await pool.wait_connected(5.0)
            assert await pool.query([FILTER], timeout=3.0) == [real]
            dropped = pool.dropped()[hostile.url]
            assert dropped["bad_json"] == 1 and dropped["unknown_sub"] == 1
            assert dropped["bad_message"] == 1 and dropped["unknown_message"] == 1
        finally:
            await pool.close()


async def test_slightly_future_event_is_accepted(relays: EmbeddedRelay) -> None:
    """The future rule drops only what is more than 15 minutes ahead: clock skew is tolerated."""
    soon = genuine("a device whose clock runs 5 minutes fast", int(time.time()) + 5 * 60)
    async with HostileRelay([soon.to_dict()]) as hostile:
        pool = RelayPool([hostile.url], **FAST)
        await pool.start()
        try:
            await pool.wait_connected(5.0)
            assert await pool.query([FILTER], timeout=3.0) == [soon]
            assert sum(pool.dropped()[hostile.url].values()) == 0
        finally:
            await pool.close()


async def test_content_that_is_not_nip44_passes_the_pool_and_fails_to_decrypt(relays: EmbeddedRelay) -> None:
    """Signed with our own key (a buggy client, or a replay of an old plaintext event): the pool
    cannot tell, so the memory store must refuse it when decryption fails, and count it."""
    bad = memory_event("this is not a NIP-44 payload", int(time.time()) - 30)
    async with HostileRelay([bad.to_dict()]) as hostile:
        pool = RelayPool([hostile.url], **FAST)
        await pool.start()
        try:
            await pool.wait_connected(5.0)
            assert await pool.query([FILTER], timeout=3.0) == [bad]
        finally:
            await pool.close()
    with pytest.raises(Nip44Error):
        nip44.decrypt(bad.content, CONVERSATION_KEY)


async def test_a_subscription_without_an_authors_filter_lets_other_authors_through(relays: EmbeddedRelay) -> None:
    """Why memory queries must name the author: the pool only enforces the filter it was given."""
    other = memory_event("mallory", int(time.time()) - 10, sk=MALLORY)
    async with HostileRelay([other.to_dict()]) as hostile:
        pool = RelayPool([hostile.url], **FAST)
        await pool.start()
        try:
            await pool.wait_connected(5.0)
            assert await pool.query([{"kinds": [30078], "#d": [D]}], timeout=3.0) == [other]
            assert await pool.query([FILTER], timeout=3.0) == []
        finally:
            await pool.close()
