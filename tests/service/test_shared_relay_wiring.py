"""The shared embedded relay as the app and the CLI use it: one relay process per data dir, found by every
didactyl on it (a CLI save reaches the running app's live subscription), and found or started again when it
goes away while the app runs."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from agent_support import OTHER_KEY, note_event
from cli_support import cli_env_on, didactyl
from impostor_relay import ImpostorRelay, PortSnatcher
from relay_servers import eventually, fast_client_kwargs, free_port
from shared_relay_support import database_held, request_reload
from tui_support import TEST_KEY, make_config, started, wait_for
from tui_support import make_app as make_tui_app

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.nostr.embedded_relay.lockfile import LOCK_FILE, read_lock
from didactyl_tui.nostr.embedded_relay.probe import fetch_info_document
from didactyl_tui.nostr.embedded_relay.shared import find_shared_relay, stop_shared_relay
from didactyl_tui.nostr.results import ConnectionState
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import ServiceWarning
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.widgets.memory_pane import MemoryPane

ST = DocumentKey.SHORT_TERM
SIZE = (130, 40)


def where_the_relay_is(data_dir: Path) -> tuple[str, int] | None:
    """What any reader of relay.lock learns: where the relay listens now."""
    lock = read_lock(data_dir / LOCK_FILE)
    return (lock.connect_host, lock.port) if lock is not None else None


def keeper_options(keeper: object) -> dict[str, object]:
    """The options the relay enforces now, as relay.lock says (a reload keeps them, changing one)."""
    return dict(keeper.relay.options)  # type: ignore[attr-defined]


async def test_a_cli_save_reaches_the_running_apps_pane_and_the_next_editor_save_has_no_conflict(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    app = make_tui_app(data, make_config(publish_profile=False), clock=time.time)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        url = app.service.relays.embedded_url
        assert url is not None
        saved = await asyncio.to_thread(didactyl, cli_env_on(tmp_path, data), "memory", "save", "--type", "short_term",
                                        "--content", "saved by the CLI", "--json")
        assert saved.returncode == 0, saved.stderr
        assert saved.stderr == ""  # no port warning: the CLI used the app's relay, it did not start its own
        assert json.loads(saved.stdout)["accepted_by"] == [url]
        pane = app.main_screen.query_one("#short-term", MemoryPane)
        # Through the live subscription (no reload happens here); the 2 s figure is checked by hand in tmux.
        await wait_for(pilot, lambda: pane.snapshot.content == "saved by the CLI", 10, "the CLI's save in the pane")
        prompt = await app.service.prompt.dry_run(await app.service.chat.new_session(), "hi")
        short_term = next(layer for layer in prompt.layers if layer.section == "short_term_memory")
        assert "saved by the CLI" in short_term.content  # the next prompt uses it
        cli_id = app.service.documents.snapshot(ST).event_id

        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
        editor.text_area.load_text("saved by the CLI\nand edited in the app")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.service.documents.snapshot(ST).content.endswith("edited in the app"), 10,
                       "the save")
        await pilot.wait_for_scheduled_animations()
        assert editor.theirs is None and not editor.query_one("#editor-conflict").display
        assert app.service.documents.snapshot(ST).event_id != cli_id
    shown = await asyncio.to_thread(didactyl, cli_env_on(tmp_path, data), "memory", "show", "--type", "short_term")
    assert shown.stdout.strip() == "saved by the CLI\nand edited in the app", shown.stderr


@pytest.mark.parametrize("same_port", [False, True], ids=["any-port", "configured-port"])
async def test_the_app_finds_or_starts_the_relay_again_when_it_goes_away(tmp_path: Path, same_port: bool) -> None:
    cfg = make_config(publish_profile=False)
    if same_port:
        cfg.relays.embedded_port = free_port()
    data = tmp_path / "data"
    async with AppService(cfg, data_dir=data, env={"DIDACTYL_NSEC": TEST_KEY.nsec()}) as svc:
        keeper = svc.runtime.relay_keeper
        assert keeper is not None
        first = keeper.relay
        assert first.started_by_us
        assert (await svc.documents.save(ST, "before")).any_accepted
        assert await stop_shared_relay(first)
        deadline = time.monotonic() + 30
        while not (keeper.relay.token != first.token
                   and svc.relays.states().get(svc.relays.embedded_url) is ConnectionState.CONNECTED):
            assert time.monotonic() < deadline, f"no relay again: {svc.relays.states()}"
            await asyncio.sleep(0.05)
        again = await find_shared_relay(data)
        assert again is not None and again.url == svc.relays.embedded_url and svc.relays.urls == [again.url]
        assert (again.url == first.url) is same_port  # the configured port again; else wherever it listens now
        # Started again with the same options: only the agent's key may write.
        stranger = await svc.parts.runtime.pool.publish(note_event(OTHER_KEY, "hi", int(time.time())), timeout=5)
        assert "blocked" in stranger.summary()
        # Same database: what was saved before is there, and saving works again.
        result = await svc.documents.save(ST, "after")
        assert result.outcome.accepted_by == [again.url]


async def test_a_port_held_by_another_program_is_named_once(tmp_path: Path) -> None:
    import socket

    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        cfg = make_config(publish_profile=False)
        cfg.relays.embedded_port = port
        env = cli_env_on(tmp_path, tmp_path / "data")
        (tmp_path / "config" / "didactyl" / "config.toml").write_text(f"[relays]\nembedded_port = {port}\n")
        first = await asyncio.to_thread(didactyl, env, "memory", "save", "--type", "short_term", "--content", "a")
        second = await asyncio.to_thread(didactyl, env, "memory", "save", "--type", "short_term", "--content", "b")
    assert first.returncode == 0 and f"port {port} is taken by another program" in first.stderr
    assert second.returncode == 0 and "port" not in second.stderr  # it found the relay the first one started


async def test_reviving_a_relay_that_cannot_start_gives_up_after_its_bound_with_one_warning(tmp_path: Path) -> None:
    from didactyl_tui.agent.background import BackgroundTasks
    from didactyl_tui.nostr.embedded_relay.shared import SharedRelay
    from didactyl_tui.nostr.pool import RelayPool
    from didactyl_tui.nostr.relay_proof import ProofKey
    from didactyl_tui.service.relay_keeper import EmbeddedRelayKeeper

    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the data dir should be")  # every attempt fails at once
    gone = SharedRelay("ws://127.0.0.1:9", False, 1, "127.0.0.1", 9, "t", blocked / "relay.sqlite3", 9,
                       ProofKey(bytes(32)))
    daemons = BackgroundTasks()
    warnings: list[str] = []
    keeper = EmbeddedRelayKeeper(gone, RelayPool([]), daemons, make_config(), blocked, warnings.append, attempts=4,
                                 first_pause_s=0.01)
    for _ in range(50):  # a flood of state changes starts one revival at a time
        keeper.state_changed(gone.url, ConnectionState.BACKOFF)
    await asyncio.wait_for(daemons.settle(30), 35)
    assert len(warnings) == 1 and warnings[0].startswith("the embedded relay is not available: ")
    assert keeper.revivals == 0 and keeper.relay is gone


async def test_serve_sends_nothing_to_a_program_that_takes_the_relays_port_in_a_reload_and_says_so(
        tmp_path: Path) -> None:
    """The Done-when of #30: while `serve` runs, the relay restarts inside its process (a reload) and a local program
    binds its port in between, knowing all a local user can read (NIP-11, relay.lock, the port) and passing each
    nonce on to the relay itself. `serve` sends it no subscription and no event, says so, and goes on with the real
    relay where relay.lock says it came back. The restart is held on the database until both the pool's client and
    the keeper's search have met the impostor: no timing decides."""
    cfg = make_config(publish_profile=False)
    cfg.relays.embedded_port = free_port()
    data = tmp_path / "data"
    warnings: list[str] = []
    async with AppService(cfg, data_dir=data, env={"DIDACTYL_NSEC": TEST_KEY.nsec()}, answer_dms=True,
                          relay_client_options=fast_client_kwargs()) as svc:
        svc.add_listener(lambda e: warnings.append(e.message) if isinstance(e, ServiceWarning) else None)
        keeper = svc.runtime.relay_keeper
        assert keeper is not None
        first = keeper.relay
        client = svc.runtime.pool.client(first.url)
        assert (await svc.documents.save(ST, "before")).any_accepted
        learned = await fetch_info_document(first.host, first.port)
        snatcher = PortSnatcher(first.port).start()
        impostor: ImpostorRelay | None = None
        try:
            with database_held(first.db_path):  # the relay's restart waits here, its port closed
                request_reload(data, first.pid, {**keeper_options(keeper), "db_busy_timeout": 60.0})
                assert await eventually(lambda: snatcher.sock is not None, 20)
                sock = await snatcher.finish()
                assert sock is not None
                impostor = ImpostorRelay(instance=first.token, info=learned, proof="relay", sock=sock,
                                         relay_at=lambda: where_the_relay_is(data))
                await impostor.start()
                assert await eventually(lambda: client.refusals >= 1 and impostor.probes >= 1, 20), warnings
                during = await svc.documents.save(ST, "while the impostor holds the port")
                assert not during.any_accepted  # kept for the real relay, not given to the impostor
            assert await eventually(lambda: svc.relays.embedded_url != first.url
                                    and svc.relays.states().get(svc.relays.embedded_url) is ConnectionState.CONNECTED,
                                    30), (svc.relays.states(), warnings)
            moved = keeper.relay
            assert moved.pid == first.pid and moved.port != first.port
            after = await svc.documents.save(ST, "after")
            assert after.outcome.accepted_by == [moved.url]
            assert impostor.upgrades >= 1 and impostor.frames == []  # not a REQ, not an EVENT, not anything
            port = f"127.0.0.1:{first.port}"
            refused = [w for w in warnings if w.startswith("the embedded relay's connection was refused")]
            assert refused and all(port in w and "nothing was sent to it" in w for w in refused)
            searched = [w for w in warnings if w.startswith("the embedded relay: the server on")]
            assert searched and all(port in w and "did not prove" in w for w in searched)
            assert len(refused) == len(set(refused)) and len(searched) == len(set(searched))  # each said once
        finally:
            if impostor is not None:
                await impostor.stop()


def test_the_keeper_refuses_a_pool_whose_embedded_relay_client_checks_no_proof(tmp_path: Path) -> None:
    """The pool's connection to the embedded relay cannot skip the check: a keeper is never wired to one that would."""
    from didactyl_tui.agent.background import BackgroundTasks
    from didactyl_tui.errors import RelayError
    from didactyl_tui.nostr.embedded_relay.shared import SharedRelay
    from didactyl_tui.nostr.pool import RelayPool
    from didactyl_tui.nostr.relay_proof import ProofKey
    from didactyl_tui.service.relay_keeper import EmbeddedRelayKeeper

    key = ProofKey(bytes(32))
    relay = SharedRelay("ws://127.0.0.1:9", False, 1, "127.0.0.1", 9, "t", tmp_path / "relay.sqlite3", 9, key)
    with pytest.raises(RelayError, match="does not check its identity"):
        EmbeddedRelayKeeper(relay, RelayPool([relay.url]), BackgroundTasks(), make_config(), tmp_path, print)
    EmbeddedRelayKeeper(relay, RelayPool([relay.url], proof_keys={relay.url: key}), BackgroundTasks(), make_config(),
                        tmp_path, print)
