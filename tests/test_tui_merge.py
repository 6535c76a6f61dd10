"""A concurrent edit seen by the running app opens the merge view: both texts, their diff, a merged draft; saving
it goes through the one save path, based on the winner."""

from __future__ import annotations

from pathlib import Path

from agent_support import Clock, memory_event
from memory_support import held, put, text_of
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs
from tui_support import TEST_KEY, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.agent.memory.lineage import base_of
from didactyl_tui.service import AppService, DocumentKey
from didactyl_tui.tui.app import DidactylApp
from didactyl_tui.tui.screens.merge import MergeScreen, union_draft

ST = DocumentKey.SHORT_TERM
T0 = 1_750_000_000
SIZE = (130, 40)


def test_the_draft_is_theirs_then_the_lines_only_ours_had() -> None:
    assert union_draft("a\nb\n", "a\nc\n") == "a\nb\nc\n"
    assert union_draft("same\n", "same\n") == "same\n"
    assert union_draft("", "only ours") == "only ours"


async def test_a_concurrent_edit_opens_the_merge_view_and_saving_it_builds_on_theirs(tmp_path: Path) -> None:
    relay = EmbeddedRelayUnderTest(tmp_path / "relay.sqlite3")
    await relay.start()
    try:
        cfg = make_config(urls=[relay.url], publish_profile=False)
        cfg.relays.embedded = False
        env, clock = make_env(), Clock(T0)
        service = AppService(cfg, data_dir=tmp_path / "d", env=env, clock=clock,
                             relay_client_options=fast_client_kwargs())
        app = DidactylApp(cfg, data_dir=tmp_path / "d", env=env, service=service)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            base = await service.save_memory(ST, "groceries\n")
            clock.t += 10
            ours = await service.save_memory(ST, "groceries\ncall Ana\n")
            # Another device edited the base, not ours: a concurrent edit, newer than ours.
            theirs = memory_event(TEST_KEY, "groceries\nfix the bike\n", T0 + 20, prev=base.event_id)
            await put(relay.url, theirs)
            merge = await wait_for(pilot, lambda: isinstance(app.screen, MergeScreen) and app.screen, 10,
                                   "the merge view")
            await wait_for(pilot, lambda: merge.theirs_text is not None, 10, "both versions loaded")
            await wait_for(pilot, lambda: "+fix the bike" in screen_text(app), 10, "the diff drawn")
            text = " ".join(screen_text(app).split())
            assert ours.event_id[:8] in text and theirs.id[:8] in text
            assert "-call Ana" in text and "+fix the bike" in text  # the diff, yours → theirs
            assert merge.text_area.text == "groceries\nfix the bike\ncall Ana\n"
            clock.t += 10
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: "Merged and saved" in screen_text(app), 10, "the merged save")
            [on_relay] = await held(relay, key=TEST_KEY)
            assert text_of(on_relay, TEST_KEY) == "groceries\nfix the bike\ncall Ana\n"
            assert base_of(on_relay) == theirs.id  # a later edit for every device
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, MergeScreen), 5, "closed")
    finally:
        await relay.stop()


async def test_the_memory_pane_keeps_saying_a_newer_version_does_not_decrypt(tmp_path: Path) -> None:
    from didactyl_tui.nostr.event import sign_event

    relay = EmbeddedRelayUnderTest(tmp_path / "relay.sqlite3")
    await relay.start()
    try:
        cfg = make_config(urls=[relay.url], publish_profile=False)
        cfg.relays.embedded = False
        env = make_env()
        service = AppService(cfg, data_dir=tmp_path / "d", env=env, clock=Clock(T0),
                             relay_client_options=fast_client_kwargs())
        app = DidactylApp(cfg, data_dir=tmp_path / "d", env=env, service=service)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            saved = await service.save_memory(ST, "readable words")
            bad = sign_event(TEST_KEY, kind=30078, content="not nip-44", created_at=T0 + 3,
                             tags=[["d", "short_term_memory"], ["app", "didactyl"]])
            await put(relay.url, bad)
            pane = app.screen.memory_pane(ST)  # type: ignore[attr-defined]
            await wait_for(pilot, lambda: "does not decrypt" in str(pane.border_subtitle), 10, "the pane's notice")
            assert bad.id[:8] in str(pane.border_subtitle)
            assert "readable words" in screen_text(app) and service.memory(ST).event_id == saved.event_id
            await service.save_memory(ST, "overwritten")
            await wait_for(pilot, lambda: "does not decrypt" not in str(pane.border_subtitle), 10, "cleared")
    finally:
        await relay.stop()
