"""Many writers, one truth (#9), with real relays on loopback sockets: two app instances with one key (a later
edit is adopted quietly, a concurrent one is told with both texts kept), rust-nostr as a third writer without
the base tag, a burst of 1,000 saves never dated ahead of the clock, an undecryptable newer version that never
blanks the memory, and a relay that acknowledges without storing."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from agent_support import AGENT_KEY, Clock, memory_event, wait_for
from fault_relay import FaultProxy
from memory_support import held, put, text_of
from relay_servers import EmbeddedRelayUnderTest
from sync_support import (
    AckingVoidRelay,
    conflicts,
    recorder,
    rust_memory_event,
    rust_publish,
    service_for,
    warnings,
)

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.lineage import LOST_NOTE, base_of
from didactyl_tui.nostr.event import sign_event

ST = DocumentKey.SHORT_TERM
T0 = 1_750_000_000


async def judged(service: Any) -> None:
    """Every version the service has seen so far is judged (a lost edit told, or not): a question to the
    history thread, which judges versions in arrival order and answers after them."""
    await service.documents.history(ST)


async def test_a_later_edit_from_another_instance_is_adopted_quietly(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    clock_a, clock_b = Clock(T0), Clock(T0)
    async with service_for(tmp_path / "a", relay.url, clock=clock_a) as a, \
            service_for(tmp_path / "b", relay.url, clock=clock_b) as b:
        seen_a, seen_b = recorder(a), recorder(b)
        first = await a.documents.save(ST, "A's plan")
        await wait_for(lambda: b.documents.snapshot(ST).event_id == first.event_id, timeout=5)
        clock_b.t = T0 + 10
        second = await b.documents.save(ST, "A's plan, extended by B")  # B edits after seeing A's
        [on_relay] = await held(relay)
        assert on_relay.id == second.event_id and base_of(on_relay) == first.event_id
        await wait_for(lambda: a.documents.snapshot(ST).event_id == second.event_id, timeout=5)
        assert a.documents.snapshot(ST).content == "A's plan, extended by B"
        # A sequential edit: no notice, recorded in the history, and A's next edit builds on it.
        history = {v.event_id: v for v in await a.documents.history(ST)}
        assert history[second.event_id].origin == "remote" and history[first.event_id].note == ""
        clock_a.t = T0 + 20
        third = await a.documents.save(ST, "and A again")
        await wait_for(lambda: b.documents.snapshot(ST).event_id == third.event_id, timeout=5)
        await judged(a)
        await judged(b)  # any (wrong) notice would have been told by now
        assert conflicts(seen_a) == [] and conflicts(seen_b) == []
        assert not any("concurrent" in w for w in warnings(seen_a) + warnings(seen_b))


async def test_a_concurrent_edit_is_told_with_both_texts_kept_and_merge_offered(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    clock_a, clock_b = Clock(T0), Clock(T0)
    async with service_for(tmp_path / "a", relay.url, clock=clock_a) as a, \
            service_for(tmp_path / "b", relay.url, clock=clock_b) as b:
        seen_a = recorder(a)
        base = await a.documents.save(ST, "shared")
        await wait_for(lambda: b.documents.snapshot(ST).event_id == base.event_id, timeout=5)
        await relay.stop()
        clock_a.t, clock_b.t = T0 + 10, T0 + 20
        mine = await a.documents.save(ST, "A, offline")
        theirs = await b.documents.save(ST, "B, offline")
        await relay.start()
        await wait_for(lambda: bool(conflicts(seen_a)), timeout=10)
        [told] = conflicts(seen_a)
        assert (told.lost_event_id, told.winner_event_id) == (mine.event_id, theirs.event_id)
        assert a.documents.snapshot(ST).content == "B, offline"  # which text won: the newer one
        [line] = [w for w in warnings(seen_a) if "concurrent edit" in w]
        assert mine.event_id[:8] in line and theirs.event_id[:8] in line and "kept in the history" in line
        texts = {v.event_id: (v.content, v.note) for v in await a.documents.history(ST)}
        assert texts[mine.event_id] == ("A, offline", LOST_NOTE)
        assert texts[theirs.event_id] == ("B, offline", "")
        # The merge: a diff between the two versions, then a save built on the winner (a later edit for B).
        diff = await a.documents.diff(ST, mine.event_id, theirs.event_id)
        assert "-A, offline" in diff and "+B, offline" in diff
        clock_a.t = T0 + 30
        merged = await a.documents.save(ST, "A and B, merged")
        await wait_for(lambda: b.documents.snapshot(ST).event_id == merged.event_id, timeout=5)
        [on_relay] = await held(relay)
        assert base_of(on_relay) == theirs.event_id


async def test_rust_nostr_without_a_base_tag_is_judged_by_what_this_device_has_seen(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    pytest.importorskip("nostr_sdk")
    proxy = FaultProxy(relay.url)
    await proxy.start()
    try:
        async with service_for(tmp_path / "a", proxy.url) as a:
            seen = recorder(a)
            # 1. Our save reached the relay; rust-nostr then writes a newer version: it could have read ours.
            ours = await a.documents.save(ST, "ours, delivered")
            assert ours.any_accepted
            later = rust_memory_event("rust, after reading ours", ours.created_at + 1)
            await rust_publish(relay.url, later)
            await wait_for(lambda: a.documents.snapshot(ST).event_id == later.id, timeout=5)
            await judged(a)
            assert conflicts(seen) == [] and a.documents.snapshot(ST).content == "rust, after reading ours"
            # 2. Our next save never reaches a relay before rust-nostr's next version arrives: not based on ours.
            proxy.reject_next(1000, "error: scripted outage")
            unsent = await a.documents.save(ST, "ours, not delivered")
            assert not unsent.any_accepted
            concurrent = rust_memory_event("rust, not knowing ours", unsent.created_at + 1)
            await rust_publish(relay.url, concurrent)
            await wait_for(lambda: bool(conflicts(seen)), timeout=10)
            assert [(c.lost_event_id, c.winner_event_id) for c in conflicts(seen)] == [(unsent.event_id, concurrent.id)]
            kept = {v.event_id: v for v in await a.documents.history(ST)}[unsent.event_id]
            assert kept.content == "ours, not delivered" and kept.note == LOST_NOTE
    finally:
        await proxy.stop()


async def test_a_thousand_saves_in_one_turn_are_never_dated_ahead_and_later_saves_succeed(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    async with service_for(tmp_path / "a", relay.url) as a, service_for(tmp_path / "b", relay.url) as b:
        ahead: list[float] = []
        for n in range(1000):
            outcome = await a.chat.dispatch_tool("memory_save", {"type": "short_term", "content": f"save {n}"})
            assert not outcome.is_error, outcome.content
            snap = a.documents.snapshot(ST)
            ahead.append((snap.created_at or 0) - time.time())
            assert snap.content == f"save {n}"  # the agent sees its newest words at once
        assert max(ahead) <= 5
        # The burst's newest text goes out within seconds, dated no more than 5 s ahead.
        await wait_for(lambda: a.documents.snapshot(ST).event_id is not None
                       and text_of(a.parts.runtime.store.current_event(ST)) == "save 999", timeout=10)
        local = [v for v in await a.documents.history(ST) if v.origin == "local"]
        assert local and all(v.created_at <= v.seen_at + 5 for v in local)
        # Later saves, here and on another device, succeed.
        mine = await a.documents.save(ST, "after the burst, here")
        assert mine.any_accepted and mine.created_at <= time.time() + 5
        await wait_for(lambda: b.documents.snapshot(ST).event_id == mine.event_id, timeout=10)
        theirs = await b.documents.save(ST, "after the burst, elsewhere")
        assert theirs.any_accepted and theirs.created_at <= time.time() + 5
        await wait_for(lambda: a.documents.snapshot(ST).event_id == theirs.event_id, timeout=10)
        assert [text_of(ev) for ev in await held(relay)] == ["after the burst, elsewhere"]


async def test_an_undecryptable_newer_version_keeps_the_previous_memory_and_warns(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    other = EmbeddedRelayUnderTest(tmp_path / "other.sqlite3")
    await other.start()
    try:
        good = memory_event(AGENT_KEY, "the readable plan", T0)
        bad = sign_event(AGENT_KEY, kind=30078, content="another app's format, not NIP-44", created_at=T0 + 10,
                         tags=[["d", "short_term_memory"], ["app", "didactyl"]])
        await put(relay.url, good)
        await put(other.url, bad)
        async with service_for(tmp_path / "a", relay.url, other.url, clock=Clock(T0 + 20)) as a:
            seen = recorder(a)
            snap = a.documents.snapshot(ST)
            assert (snap.content, snap.event_id) == ("the readable plan", good.id)
            # persistent: on the snapshot the views show
            assert (snap.unreadable.event_id, snap.unreadable.relay) == (bad.id, other.url)
            status = await a.documents.status(ST, bring_up_to_date=True)  # a repair never overwrites it with ours
            assert [ev.id for ev in await held(other)] == [bad.id]
            assert status.newest_event_id == good.id
            versions = {v.event_id: v for v in await a.documents.history(ST)}
            assert "does not decrypt" in versions[bad.id].note
            # The user overwrites it: the next save supersedes it (dated after it), blank never published.
            saved = await a.documents.save(ST, "the readable plan, saved again")
            assert saved.created_at > bad.created_at and sorted(saved.outcome.accepted_by) == sorted(
                [relay.url, other.url])
            assert a.documents.snapshot(ST).unreadable is None
            assert [text_of(ev) for ev in await held(other)] == ["the readable plan, saved again"]
            assert [w for w in warnings(seen) if "blank" in w] == []
        for r in (relay, other):
            assert all(ev.content for ev in await held(r))  # nothing blank published anywhere
    finally:
        await other.stop()


async def test_an_undecryptable_version_that_replaced_ours_on_the_only_relay_leaves_ours_in_place(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    async with service_for(tmp_path / "a", relay.url) as a:
        saved = await a.documents.save(ST, "kept here")
    bad = sign_event(AGENT_KEY, kind=30078, content="damaged", created_at=saved.created_at + 1,
                     tags=[["d", "short_term_memory"], ["app", "didactyl"]])
    await put(relay.url, bad)
    assert [ev.id for ev in await held(relay)] == [bad.id]  # the relay keeps only the newest
    async with service_for(tmp_path / "a", relay.url) as a:
        snap = a.documents.snapshot(ST)
        assert (snap.content, snap.event_id, snap.unreadable.event_id, snap.unreadable.relay) == (
            "kept here", saved.event_id, bad.id, relay.url)
        await a.documents.status(ST, bring_up_to_date=True)
        assert [ev.id for ev in await held(relay)] == [bad.id]  # never overwritten without the user


async def test_the_warning_names_the_undecryptable_version_and_its_relay(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    async with service_for(tmp_path / "a", relay.url) as a:
        seen = recorder(a)
        saved = await a.documents.save(ST, "readable")
        bad = sign_event(AGENT_KEY, kind=30078, content="garbage", created_at=saved.created_at + 1,
                         tags=[["d", "short_term_memory"], ["app", "didactyl"]])
        await put(relay.url, bad)
        await wait_for(lambda: a.documents.snapshot(ST).unreadable is not None, timeout=5)
        assert a.documents.snapshot(ST).content == "readable" and a.documents.snapshot(ST).event_id == saved.event_id
        [line] = [w for w in warnings(seen) if "does not decrypt" in w]
        assert bad.id[:12] in line and relay.url in line


async def test_a_relay_that_acknowledges_and_keeps_nothing_is_not_counted_as_holding_the_memory(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    async with AckingVoidRelay() as void:
        async with service_for(tmp_path / "a", relay.url, void.url) as a:
            saved = await a.documents.save(ST, "kept by one relay only")
            assert sorted(saved.outcome.accepted_by) == sorted([relay.url, void.url])  # both said OK
            for fix in (False, True):
                status = await a.documents.status(ST, bring_up_to_date=fix)
                rows = {r.url: r for r in status.relays}
                assert rows[relay.url].current and not rows[relay.url].acknowledged_not_serving
                assert rows[void.url].acknowledged_not_serving and not rows[void.url].current
                assert rows[void.url].describe().endswith("acknowledged but not serving the newest version")
                assert void.url not in status.brought_up_to_date
                assert status.to_json_dict()["relays"][void.url]["acknowledged_not_serving"] is True


async def test_the_cli_names_both_versions_and_prints_the_lost_text_for_merging(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    from bad_inputs_support import cli, cli_env

    env = cli_env(tmp_path, f'[relays]\nembedded = false\nurls = ["{relay.url}"]\ntimeout_s = 10.0\n'
                            '[memory]\nbackend = "none"\n[agent]\npublish_profile = false\n',
                  DIDACTYL_NSEC=AGENT_KEY.nsec())
    await put(relay.url, memory_event(AGENT_KEY, "base", int(time.time()) - 100))
    base_id = (await held(relay))[0].id
    # This device's save never reaches the relay (it is down); another device edits the base meanwhile.
    await relay.stop()
    saved = await asyncio.to_thread(cli, ["memory", "save", "--type", "short_term", "--content", "mine"], env)
    assert saved.code == 1 and "kept in the outbox" in saved.line
    await relay.start()
    theirs = memory_event(AGENT_KEY, "theirs", int(time.time()) + 2, prev=base_id)
    await put(relay.url, theirs)
    shown = await asyncio.to_thread(cli, ["memory", "show", "--type", "short_term"], env)
    assert shown.stdout == "theirs\n"
    [line] = [w for w in shown.stderr.splitlines() if "concurrent edit" in w]
    mine_id = next(v for v in (await asyncio.to_thread(cli, ["memory", "history", "--type", "short_term"], env))
                   .stdout.splitlines() if "lost to a newer version" in v).split()[0]
    assert line.startswith("warning: concurrent edit of the short-term memory: your version "
                           f"{mine_id[:8]} and another writer's version {theirs.id[:8]}")
    assert f"didactyl memory show --type short_term --version {mine_id[:8]}" in line
    old = await asyncio.to_thread(cli, ["memory", "show", "--type", "short_term", "--version", mine_id[:8]], env)
    assert old.code == 0 and old.stdout == "mine\n"


async def test_a_save_refused_for_good_is_reported_refused_and_never_blocks_the_next(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    from bad_inputs_support import cli, cli_env

    proxy = FaultProxy(relay.url)
    await proxy.start()
    try:
        async with service_for(tmp_path / "a", proxy.url) as a:
            proxy.reject_next(1, "invalid: event creation date is too far off from the current time")
            refused = await a.documents.save(ST, "refused")
            assert refused.refused and not refused.any_accepted
            assert refused.to_json_dict()["refused"] is True
            assert await a.documents.pending_publishes() == []  # nothing "will be resent"
            later = await a.documents.save(ST, "the next one")
            assert later.any_accepted and not later.refused
            assert [text_of(ev) for ev in await held(relay)] == ["the next one"]
        env = cli_env(tmp_path, f'[relays]\nembedded = false\nurls = ["{proxy.url}"]\ntimeout_s = 10.0\n'
                                '[memory]\nbackend = "none"\n[agent]\npublish_profile = false\n',
                      DIDACTYL_NSEC=AGENT_KEY.nsec())
        proxy.reject_next(1, "blocked: not on the list")
        result = await asyncio.to_thread(cli, ["memory", "save", "--type", "short_term", "--content", "x"], env)
        assert result.code == 1 and "refused the short-term memory for good" in result.line
        assert "not resent" in result.line and "sent again" not in result.line
    finally:
        await proxy.stop()


async def test_the_agent_is_told_at_once_when_a_fast_clock_elsewhere_blocks_its_save(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    ahead = memory_event(AGENT_KEY, "from a fast clock", T0 + 600)
    await put(relay.url, ahead)
    async with service_for(tmp_path / "a", relay.url, clock=Clock(T0)) as a:
        assert a.documents.snapshot(ST).event_id == ahead.id
        outcome = await a.chat.dispatch_tool("memory_save", {"type": "short_term", "content": "the agent's words"})
        assert outcome.is_error and "600 s ahead of this device's clock" in outcome.content
        assert [ev.id for ev in await held(relay)] == [ahead.id]
        kept = [v for v in await a.documents.history(ST) if v.note.startswith("not published")]
        assert [v.content for v in kept] == ["the agent's words"]


async def test_a_burst_still_waiting_at_stop_is_sent_before_the_service_ends(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    async with service_for(tmp_path / "a", relay.url) as a:
        for n in range(20):
            await a.chat.dispatch_tool("memory_save", {"type": "short_term", "content": f"burst {n}"})
        assert a.documents.snapshot(ST).content == "burst 19"
    # Stopped right after the burst: the newest text went out, dated at most 5 s ahead.
    [on_relay] = await held(relay)
    assert text_of(on_relay) == "burst 19" and on_relay.created_at <= time.time() + 5


async def test_partial_edits_in_a_burst_lose_no_line_and_never_wait_for_the_clock(
        tmp_path: Path, relay: EmbeddedRelayUnderTest) -> None:
    want = "plan 9\n" + "\n".join(f"line {n}" for n in range(20))
    async with service_for(tmp_path / "a", relay.url) as a:
        for n in range(10):  # a burst: past the first few, the newest text waits for the clock
            await a.chat.dispatch_tool("memory_save", {"type": "short_term", "content": f"plan {n}"})
        deferred = []
        for n in range(20):
            outcome = await a.chat.dispatch_tool("memory_insert", {"type": "short_term", "new_str": f"line {n}"})
            assert not outcome.is_error, outcome.content
            assert f"+line {n}" in outcome.content  # the change, as a diff
            deferred.append(json.loads(outcome.content)["deferred"])
        assert deferred[0]  # made to the burst's text waiting, at once (not after the clock)
        assert a.documents.snapshot(ST).content == want  # the agent sees every line at once

        async def on_the_relay() -> bool:  # signed once the clock allows, and delivered (retried if need be)
            return [text_of(ev) for ev in await held(relay)] == [want]

        await wait_for(on_the_relay, timeout=30)
    [on_relay] = await held(relay)
    assert text_of(on_relay) == want and on_relay.created_at <= time.time() + 5
