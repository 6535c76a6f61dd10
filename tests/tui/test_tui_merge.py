"""A concurrent edit seen by the running app opens the merge view: both texts, their diff, a draft merged from
their common base (a deletion kept deleted, a true conflict marked and counted, saving refused while marked); the
configured model may propose a resolution, shown as a diff to accept or discard; saving goes through the one save
path, based on the winner."""

from __future__ import annotations

from pathlib import Path

from agent_support import Clock, memory_event
from llm_stub import LlmStub, Reply
from memory_support import held, put, text_of
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs
from tui_support import TEST_KEY, click, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.lineage import base_of
from didactyl_tui.service.app import AppService
from didactyl_tui.tui.app import DidactylApp
from didactyl_tui.tui.screens.merge import MergeScreen, ProposalScreen

ST = DocumentKey.SHORT_TERM
T0 = 1_750_000_000
SIZE = (130, 40)


def app_on(relay: EmbeddedRelayUnderTest, tmp_path: Path, clock: Clock,
           llm_base_url: str | None = None) -> tuple[AppService, DidactylApp]:
    """The app and its service on ``relay`` only (no embedded relay, nothing published at start)."""
    cfg = make_config(urls=[relay.url], publish_profile=False, llm_base_url=llm_base_url)
    cfg.relays.embedded = False
    env = make_env()
    service = AppService(cfg, data_dir=tmp_path / "d", env=env, clock=clock, relay_client_options=fast_client_kwargs())
    return service, DidactylApp(cfg, data_dir=tmp_path / "d", env=env, service=service)


async def test_a_concurrent_edit_opens_the_merge_view_and_saving_it_builds_on_theirs(tmp_path: Path) -> None:
    relay = EmbeddedRelayUnderTest(tmp_path / "relay.sqlite3")
    await relay.start()
    try:
        clock = Clock(T0)
        service, app = app_on(relay, tmp_path, clock)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            base = await service.documents.save(ST, "groceries\n")
            clock.t += 10
            ours = await service.documents.save(ST, "groceries\ncall Ana\n")
            # Another device edited the base, not ours: a concurrent edit, newer than ours.
            theirs = memory_event(TEST_KEY, "groceries\nfix the bike\n", T0 + 20, prev=base.event_id)
            await put(relay.url, theirs)
            merge = await wait_for(pilot, lambda: isinstance(app.screen, MergeScreen) and app.screen, 10,
                                   "the merge view")
            await wait_for(pilot, lambda: merge.draft is not None, 10, "both versions loaded and merged")
            await wait_for(pilot, lambda: "+fix the bike" in screen_text(app), 10, "the diff drawn")
            text = " ".join(screen_text(app).split())
            assert ours.event_id[:8] in text and theirs.id[:8] in text
            assert "-call Ana" in text and "+fix the bike" in text  # the diff, yours → theirs
            # Both added a line at the same place: a true conflict, marked for the person and counted.
            assert merge.text_area.text == ("groceries\n<<<<<<< yours\ncall Ana\n=======\nfix the bike\n"
                                            ">>>>>>> theirs\n")
            await wait_for(pilot, lambda: "1 conflict to resolve" in screen_text(app), 5, "the count")
            assert merge.draft is not None and merge.draft.base_id == base.event_id
            await pilot.press("ctrl+s")  # refused while a conflict is marked; the text stays
            await wait_for(pilot, lambda: "Not saved: 1 conflict is still marked" in screen_text(app), 5, "refused")
            [still] = await held(relay, key=TEST_KEY)
            assert "<<<<<<< yours" in merge.text_area.text and still.id == theirs.id  # nothing published
            merge.text_area.load_text("groceries\nfix the bike\ncall Ana\n")
            await wait_for(pilot, lambda: "No conflict marked" in screen_text(app), 5, "resolved")
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


BASE = "milk\neggs\nbread\nbutter\njam\ntea\n"
OURS = "milk\nbread\nbutter\nstrawberry jam\ntea\n"  # eggs deleted, jam changed
THEIRS = "milk\neggs\nbread\nbutter\nhoney\ntea\n"  # jam changed otherwise
RESOLVED = "milk\nbread\nbutter\nstrawberry jam\nhoney\ntea\n"


async def test_the_draft_keeps_a_deletion_and_the_model_may_resolve_the_conflict(tmp_path: Path) -> None:
    relay = EmbeddedRelayUnderTest(tmp_path / "relay.sqlite3")
    await relay.start()
    try:
        async with LlmStub() as stub:
            clock = Clock(T0)
            service, app = app_on(relay, tmp_path, clock, stub.base_url)
            async with app.run_test(size=SIZE) as pilot:
                await started(pilot)
                base = await service.documents.save(ST, BASE)
                clock.t += 10
                await service.documents.save(ST, OURS)
                theirs = memory_event(TEST_KEY, THEIRS, T0 + 20, prev=base.event_id)
                await put(relay.url, theirs)
                merge = await wait_for(pilot, lambda: isinstance(app.screen, MergeScreen) and app.screen, 10,
                                       "the merge view")
                await wait_for(pilot, lambda: merge.draft is not None, 10, "the draft")
                draft = merge.text_area.text
                assert "eggs" not in draft  # deleted by us, untouched by them: stays deleted
                assert draft == ("milk\nbread\nbutter\n<<<<<<< yours\nstrawberry jam\n=======\nhoney\n"
                                 ">>>>>>> theirs\ntea\n")
                await wait_for(pilot, lambda: "1 conflict to resolve" in screen_text(app), 5, "the count")
                assert f"common base {base.event_id[:8]}" in screen_text(app)

                # The model's first proposal is discarded: the draft stays as it was.
                stub.script(Reply.text_reply("milk\nbread\nbutter\nhoney\ntea\n"))
                await pilot.press("ctrl+g")
                proposal = await wait_for(pilot, lambda: isinstance(app.screen, ProposalScreen) and app.screen,
                                          20, "the model's proposal")
                await wait_for(pilot, lambda: "-strawberry jam" in screen_text(app), 5, "its diff")
                await click(pilot, "#discard-proposal")
                await wait_for(pilot, lambda: app.screen is merge, 5, "back to the merge view")
                assert merge.text_area.text == draft and "discarded" in screen_text(app)
                [request] = stub.requests
                assert request.messages[-1] == {"role": "user", "content": draft}

                # The second is accepted: it replaces the draft in the editor, and is saved only when the person saves.
                stub.script(Reply.text_reply(RESOLVED))
                await click(pilot, "#model-draft")
                proposal = await wait_for(pilot, lambda: isinstance(app.screen, ProposalScreen) and app.screen,
                                          20, "the second proposal")
                assert proposal.proposed == RESOLVED
                await click(pilot, "#accept-proposal")
                await wait_for(pilot, lambda: merge.text_area.text == RESOLVED, 5, "the accepted draft")
                await wait_for(pilot, lambda: "No conflict marked" in screen_text(app), 5, "no conflict left")
                [still] = await held(relay, key=TEST_KEY)
                assert still.id == theirs.id  # nothing saved yet
                clock.t += 10
                await pilot.press("ctrl+s")
                await wait_for(pilot, lambda: "Merged and saved" in screen_text(app), 10, "the merged save")
                [on_relay] = await held(relay, key=TEST_KEY)
                assert text_of(on_relay, TEST_KEY) == RESOLVED and base_of(on_relay) == theirs.id
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
            saved = await service.documents.save(ST, "readable words")
            bad = sign_event(TEST_KEY, kind=30078, content="not nip-44", created_at=T0 + 3,
                             tags=[["d", "short_term_memory"], ["app", "didactyl"]])
            await put(relay.url, bad)
            pane = app.screen.memory_pane(ST)  # type: ignore[attr-defined]
            await wait_for(pilot, lambda: "does not decrypt" in str(pane.border_subtitle), 10, "the pane's notice")
            assert bad.id[:8] in str(pane.border_subtitle)
            assert "readable words" in screen_text(app) and service.documents.snapshot(ST).event_id == saved.event_id
            await service.documents.save(ST, "overwritten")
            await wait_for(pilot, lambda: "does not decrypt" not in str(pane.border_subtitle), 10, "cleared")
    finally:
        await relay.stop()
