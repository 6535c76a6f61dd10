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
from relay_servers import free_port
from tui_support import TEST_KEY, make_config, started, wait_for
from tui_support import make_app as make_tui_app

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.nostr.embedded_relay.shared import find_shared_relay, stop_shared_relay
from didactyl_tui.nostr.results import ConnectionState
from didactyl_tui.service.app import AppService
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.widgets.memory_pane import MemoryPane

ST = DocumentKey.SHORT_TERM
SIZE = (130, 40)


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
        prompt = await app.service.chat.dry_run(await app.service.chat.new_session(), "hi")
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
