"""Issue 5 wired end to end through AppService, with real relays on loopback sockets: the outbox keeps a save
no relay took and sends it when a relay is back (also across a restart), relays that lag are brought up to
date, the history keeps every version and a rollback is a new save, and two instances with one key settle on
the newest version, the loser told and its text kept."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agent_support import AGENT_KEY, Clock, memory_event, wait_for
from memory_support import held, put, text_of
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.lineage import LOST_NOTE
from didactyl_tui.config import Config
from didactyl_tui.errors import AgentError
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import DocumentChanged, OutboxChanged, ServiceWarning

ST, LT = DocumentKey.SHORT_TERM, DocumentKey.LONG_TERM
T0 = 1_750_000_000


def config_for(*urls: str, embedded: bool = False) -> Config:
    cfg = Config()
    cfg.relays.embedded.enabled = embedded
    cfg.relays.embedded_port = 0
    cfg.relays.urls = list(urls)
    cfg.relays.timeout_s = 10.0
    cfg.memory.backend = "none"
    cfg.agent.publish_profile = False
    return cfg


def service_for(data: Path, *urls: str, clock: Clock | None = None, embedded: bool = False) -> AppService:
    return AppService(config_for(*urls, embedded=embedded), data_dir=data, env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                      clock=clock or Clock(T0), relay_client_options=fast_client_kwargs())


def recorder(service: AppService) -> list[Any]:
    seen: list[Any] = []
    service.add_listener(seen.append)
    return seen


async def nothing_pending(*services: AppService) -> bool:
    return all([await svc.documents.pending_publishes() == [] for svc in services])


async def test_a_save_with_every_relay_down_stays_pending_and_lands_when_the_relay_is_back(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    relay = relays[0]
    async with service_for(tmp_path / "d", relay.url) as svc:
        seen = recorder(svc)
        await relay.stop()
        await wait_for(lambda: svc.relays.states()[relay.url].value != "connected")
        result = await svc.documents.save(ST, "written while offline")
        assert not result.any_accepted
        [pending] = await svc.documents.pending_publishes()
        assert (pending.event_id, pending.state, pending.type, pending.waiting_for) == (
            result.event_id, "pending", ST, (relay.url,))
        assert (await svc.documents.pending_publishes(LT)) == []
        assert any(isinstance(e, OutboxChanged) and e.pending == 1 for e in seen)
        # The relay restarts on the same port: the pool reconnects and the outbox sends the edit at once.
        await relay.start()
        await wait_for(lambda: nothing_pending(svc), timeout=10)
        assert [ev.id for ev in await held(relay)] == [result.event_id]
        # The count is announced after the outbox row is gone: wait for the announcement, not only the row.
        await wait_for(lambda: [e.pending for e in seen if isinstance(e, OutboxChanged)][-1] == 0, timeout=10)


async def test_a_pending_save_survives_a_restart_and_is_sent_by_the_next_run(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    relay, data = relays[0], tmp_path / "d"
    await relay.stop()
    async with service_for(data, relay.url) as svc:
        first = await svc.documents.save(ST, "edit one, offline")
        second = await svc.documents.save(ST, "edit two, offline")
        assert not first.any_accepted and not second.any_accepted
        # The newer save supersedes the older one: only the newest is still to be sent.
        assert [p.event_id for p in (await svc.documents.pending_publishes())] == [second.event_id]
    # Restarted with the relay still down: the unsent edit is still this device's memory, and still pending.
    async with service_for(data, relay.url) as svc:
        assert svc.documents.snapshot(ST).content == "edit two, offline"
        assert svc.documents.snapshot(ST).event_id == second.event_id
        assert [p.state for p in (await svc.documents.pending_publishes())] == ["pending"]
    # Restarted with the relay up: sent on start, and the older edit never is.
    await relay.start()
    async with service_for(data, relay.url) as svc:
        await wait_for(lambda: nothing_pending(svc), timeout=10)
        assert [ev.id for ev in await held(relay)] == [second.event_id]
        assert svc.documents.snapshot(ST).content == "edit two, offline"


async def test_status_finds_a_lagging_relay_and_brings_it_up_to_date(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    fresh, lagging = relays
    old = memory_event(AGENT_KEY, "old plan", T0 - 100)
    new = memory_event(AGENT_KEY, "new plan", T0 - 50)
    await put(fresh.url, new)
    await put(lagging.url, old)
    await lagging.stop()  # unreachable while the app starts, so the start-up check cannot fix it yet
    async with service_for(tmp_path / "d", fresh.url, lagging.url) as svc:
        assert svc.documents.snapshot(ST).content == "new plan"
        svc.runtime.sync.reconcile_interval_s = 3600  # the reconnect below must not fix it before we look
        status = await svc.documents.status(ST)
        by_url = {r.url: r for r in status.relays}
        assert status.newest_event_id == new.id
        assert by_url[fresh.url].current and not by_url[fresh.url].lagging
        assert not by_url[lagging.url].reachable and by_url[lagging.url].describe() == "unreachable"
        await lagging.start()
        await wait_for(lambda: svc.relays.states()[lagging.url].value == "connected", timeout=10)
        status = await svc.documents.status(ST, bring_up_to_date=True)
        row = {r.url: r for r in status.relays}[lagging.url]
        assert row.reachable and row.lagging and row.event_id == old.id and row.current
        assert status.brought_up_to_date == [lagging.url]
        assert row.describe().endswith("was lagging, brought up to date")
        assert [ev.id for ev in await held(lagging)] == [new.id]
        # Asked again: nothing lags any more.
        again = await svc.documents.status(ST)
        assert again.brought_up_to_date == [] and all(r.current for r in again.relays)
        assert again.to_json_dict()["relays"][lagging.url]["event_id"] == new.id


async def test_a_relay_that_comes_back_empty_gets_the_newest_by_itself(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    keeper, forgetful = relays
    async with service_for(tmp_path / "d", keeper.url, forgetful.url) as svc:
        svc.runtime.sync.reconcile_interval_s = 0.05
        saved = await svc.documents.save(LT, "the long view")
        assert sorted(saved.outcome.accepted_by) == sorted([keeper.url, forgetful.url])
        # The relay restarts on the same port with its data gone: the outbox knows it once accepted the
        # edit, so only the consensus check after the reconnect can notice and fix it.
        await forgetful.stop()
        forgetful.db_path = tmp_path / "wiped.sqlite3"
        await forgetful.start()
        await wait_for(lambda: svc.relays.states()[forgetful.url].value == "connected", timeout=10)
        for _ in range(200):
            if [ev.id for ev in await held(forgetful, "long_term_memory")] == [saved.event_id]:
                break
            await asyncio.sleep(0.05)
        assert [ev.id for ev in await held(forgetful, "long_term_memory")] == [saved.event_id]


async def test_history_keeps_local_and_remote_versions_and_rollback_is_a_new_save(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    relay = relays[0]
    clock = Clock(T0)
    async with service_for(tmp_path / "d", relay.url, clock=clock) as svc:
        seen = recorder(svc)
        one = await svc.documents.save(ST, "line one\n")
        clock.t += 10
        two = await svc.documents.save(ST, "line one\nline two\n")
        laptop = memory_event(AGENT_KEY, "line one\nline two\nfrom the laptop\n", T0 + 20)
        await put(relay.url, laptop)
        await wait_for(lambda: svc.documents.snapshot(ST).event_id == laptop.id, timeout=5)

        versions = await svc.documents.history(ST)
        assert [(v.event_id, v.origin, v.current) for v in versions] == [
            (laptop.id, "remote", True), (two.event_id, "local", False), (one.event_id, "local", False)]
        assert versions[1].content == "line one\nline two\n"  # decrypted on demand
        assert "line one" not in repr(versions[1])  # the view never carries the text
        assert (await svc.documents.history(LT)) == []
        diff = await svc.documents.diff(ST, one.event_id, two.event_id)
        assert "+line two" in diff and "-line one" not in diff and diff.startswith("--- ")
        assert (await svc.documents.diff(ST, one.event_id[:10], one.event_id)) == ""
        with pytest.raises(AgentError, match="not in the short-term memory history"):
            (await svc.documents.diff(ST, "ffff" * 16, one.event_id))
        with pytest.raises(AgentError, match="already the current"):
            await svc.documents.rollback(ST, laptop.id)

        clock.t += 100
        rolled = await svc.documents.rollback(ST, one.event_id)
        assert rolled.outcome.accepted_by == [relay.url]
        assert rolled.event_id not in (one.event_id, two.event_id, laptop.id)
        assert svc.documents.snapshot(ST).content == "line one\n"
        [on_relay] = await held(relay)
        assert on_relay.id == rolled.event_id and text_of(on_relay) == "line one\n"
        versions = await svc.documents.history(ST)
        assert versions[0].event_id == rolled.event_id and versions[0].origin == "local"
        assert versions[0].note == f"rollback to {one.event_id[:8]}"
        assert len(versions) == 4
        assert any(isinstance(e, DocumentChanged) and e.origin == "local" and e.snapshot.event_id == rolled.event_id
                   for e in seen)
    # The history outlives the process (encrypted on disk: no plaintext in the file).
    db = (tmp_path / "d" / "memory-history.sqlite3").read_bytes()
    assert b"line one" not in db and b"from the laptop" not in db
    async with service_for(tmp_path / "d", relay.url) as svc:
        assert len(await svc.documents.history(ST)) == 4


async def test_two_instances_one_key_newest_wins_and_the_loser_is_told(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    relay = relays[0]
    clock_a, clock_b = Clock(T0), Clock(T0)
    async with service_for(tmp_path / "a", relay.url, clock=clock_a) as a, \
            service_for(tmp_path / "b", relay.url, clock=clock_b) as b:
        seen_a, seen_b = recorder(a), recorder(b)
        base = await a.documents.save(ST, "shared plan")
        await wait_for(lambda: b.documents.snapshot(ST).event_id == base.event_id, timeout=5)
        # Both go offline and both edit; B's edit is the newer one.
        await relay.stop()
        clock_a.t, clock_b.t = T0 + 10, T0 + 20
        mine = await a.documents.save(ST, "A's offline edit")
        theirs = await b.documents.save(ST, "B's offline edit")
        assert not mine.any_accepted and not theirs.any_accepted
        await relay.start()
        # Both outboxes send; the relay keeps the newest; both instances end on it.
        await wait_for(lambda: a.documents.snapshot(ST).event_id == theirs.event_id, timeout=10)
        await wait_for(lambda: b.documents.snapshot(ST).event_id == theirs.event_id, timeout=10)
        assert a.documents.snapshot(ST).content == b.documents.snapshot(ST).content == "B's offline edit"
        for _ in range(100):
            if [ev.id for ev in await held(relay)] == [theirs.event_id]:
                break
            await asyncio.sleep(0.05)
        assert [ev.id for ev in await held(relay)] == [theirs.event_id]
        await wait_for(lambda: nothing_pending(a, b), timeout=10)
        # A lost: told once (a warning and a DocumentChanged flagged lost_local), its text in its history.
        await wait_for(lambda: any(isinstance(e, DocumentChanged) and e.lost_local for e in seen_a), timeout=5)
        lost = [e for e in seen_a if isinstance(e, DocumentChanged) and e.lost_local]
        assert [(e.origin, e.lost_event_id, e.snapshot.event_id) for e in lost] == [
            ("remote", mine.event_id, theirs.event_id)]
        warnings = [e.message for e in seen_a if isinstance(e, ServiceWarning)]
        assert any(f"concurrent edit of the short-term memory: your version {mine.event_id[:8]} and another "
                   f"writer's version {theirs.event_id[:8]}" in w for w in warnings), warnings
        kept = {v.event_id: v for v in (await a.documents.history(ST))}[mine.event_id]
        assert kept.origin == "local" and kept.note == LOST_NOTE and kept.content == "A's offline edit"
        # B won: nothing to tell it.
        assert not any(isinstance(e, DocumentChanged) and e.lost_local for e in seen_b)
        assert not any(isinstance(e, ServiceWarning) for e in seen_b)
        # And A can get its words back: a rollback is a new save, which now wins everywhere.
        clock_a.t = T0 + 30
        back = await a.documents.rollback(ST, mine.event_id)
        assert back.any_accepted
        await wait_for(lambda: b.documents.snapshot(ST).content == "A's offline edit", timeout=5)
        # A's rollback was made on top of B's version (its base): a later edit, so B is not told.
        await wait_for(lambda: b.documents.snapshot(ST).event_id == back.event_id, timeout=5)
        assert {v.event_id: v for v in (await b.documents.history(ST))}[theirs.event_id].note == ""
        assert not any(isinstance(e, DocumentChanged) and e.lost_local for e in seen_b)


async def test_a_save_after_a_version_from_a_fast_clock_is_never_dated_far_ahead(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    relay = relays[0]
    clock = Clock(T0)
    async with service_for(tmp_path / "d", relay.url, clock=clock) as svc:
        await svc.documents.save(ST, "first")
        # Another device's clock runs ahead (within the 15 minutes accepted): its version is adopted, but a
        # save here would have to be dated 601 s ahead of this clock: refused, the text kept, nothing sent.
        ahead = memory_event(AGENT_KEY, "from a fast clock", T0 + 600)
        await put(relay.url, ahead)
        await wait_for(lambda: svc.documents.snapshot(ST).event_id == ahead.id, timeout=5)
        with pytest.raises(AgentError, match=r"not saved: the newest short-term memory version is dated 600 s "
                                             r"ahead of this device's clock.*kept in the history"):
            await svc.documents.save(ST, "after it")
        kept = [v for v in await svc.documents.history(ST) if v.note.startswith("not published")]
        assert [v.content for v in kept] == ["after it"] and kept[0].created_at == T0
        assert [ev.id for ev in await held(relay)] == [ahead.id]
        # Once this clock is within the bound, the save goes out, dated after it.
        clock.t = T0 + 597
        later = await svc.documents.save(ST, "after it")
        assert later.created_at == T0 + 601 and later.any_accepted


async def test_a_version_the_relays_lost_is_restored_from_history_and_published_again(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    relay, data = relays[0], tmp_path / "d"
    phone = memory_event(AGENT_KEY, "written on the phone", T0 + 5, d="long_term_memory")
    await put(relay.url, phone)
    async with service_for(data, relay.url) as svc:
        assert (await svc.documents.load_long_term()).event_id == phone.id
    # The relay loses its data; this device still knows the newest version.
    await relay.stop()
    relay.db_path = tmp_path / "wiped.sqlite3"
    await relay.start()
    async with service_for(data, relay.url) as svc:
        snap = svc.documents.snapshot(LT)
        assert (snap.event_id, snap.content) == (phone.id, "written on the phone")
        status = await svc.documents.status(LT, bring_up_to_date=True)
        assert status.brought_up_to_date == [relay.url] and status.relays[0].current
        assert [ev.id for ev in await held(relay, "long_term_memory")] == [phone.id]
        assert [v.origin for v in (await svc.documents.history(LT))] == ["remote"]


async def test_a_save_older_than_a_version_the_publisher_knows_is_refused_and_kept(
        tmp_path: Path, relays: list[EmbeddedRelayUnderTest]) -> None:
    relay = relays[0]
    async with service_for(tmp_path / "d", relay.url) as svc:
        before = await svc.documents.save(ST, "before")
        # The publisher has learnt of a newer version the cache has not (yet) taken in.
        newer = memory_event(AGENT_KEY, "newer, elsewhere", T0 + 300)
        await svc.parts.runtime.publisher.note_remote(newer)
        with pytest.raises(AgentError, match=r"the short-term memory was not saved: a newer version of this memory "
                                             r"already exists.*your text is kept in the history"):
            await svc.documents.save(ST, "too late")
        assert svc.documents.snapshot(ST).event_id == before.event_id  # the cache did not keep the unsent text
        [kept] = [v for v in (await svc.documents.history(ST)) if v.note]
        assert kept.content == "too late" and kept.note.startswith("not published")
        assert [ev.id for ev in await held(relay)] == [before.event_id]
