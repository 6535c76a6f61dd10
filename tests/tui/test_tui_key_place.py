"""The first run's question, where the agent's key lives (tui/screens/key_place.py, service/signer_setup.py): shown
before the service starts only when no key is anywhere; a key made here (Enter), a pasted bunker:// URI (the scripted
bunker of tests/nip46_bunker.py), or a phone signer answering the nostrconnect:// code shown. A chosen signer is kept
as the config names one: the connection in signer.json, ``[signer] bunker`` (no secret) in the config file."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import threading
import tomllib
import traceback
from pathlib import Path

from agent_support import AGENT_KEY
from nip46_bunker import ScriptedBunker
from relay_servers import fast_client_kwargs
from tui_support import SIZE, TEST_KEY, LoopIoWatch, make_app, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.nip46_uri import BunkerUri
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.tui.app import NO_KEY_MADE
from didactyl_tui.tui.screens.confirm import ConfirmScreen
from didactyl_tui.tui.screens.key_place import KeyPlaceScreen, PhoneSignerScreen
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.widgets.memory_gauge import MemoryGauge

ME = AGENT_KEY.public_key_hex


def first_run_env(tmp_path: Path) -> dict[str, str]:
    env = make_env(XDG_CONFIG_HOME=str(tmp_path / "config"))
    del env["DIDACTYL_NSEC"]  # no key anywhere: a first run
    return env


def config_file(tmp_path: Path) -> Path:
    return tmp_path / "config" / "didactyl" / "config.toml"


def footer(app) -> str:
    lines = screen_text(app).splitlines()
    return " ".join(lines[-1].split()) if lines else ""


def notifications(app) -> list[tuple[str, str]]:
    """(severity, message) of every notification the app shows from now on (they expire on screen)."""
    shown: list[tuple[str, str]] = []
    notify = app.notify

    def recorded(message: str, **kwargs) -> None:
        shown.append((kwargs.get("severity", "information"), message))
        notify(message, **kwargs)

    app.notify = recorded
    return shown


def setup_threads(before: frozenset[threading.Thread] = frozenset()) -> list[threading.Thread]:
    """The signer setup's threads alive now, but for ``before`` (an earlier test's, still closing in this worker
    process: each is bounded by its own stop timeout, and is not this test's to wait for)."""
    return [t for t in threading.enumerate() if t.name == "didactyl-signer-setup" and t not in before]


def thread_stacks(threads: list[threading.Thread]) -> str:
    """Where each of ``threads`` is now (a wait that timed out says what it waited for)."""
    frames = sys._current_frames()
    return "\n".join(f"{t.name}:\n" + "".join(traceback.format_stack(frames[t.ident])) for t in threads
                     if t.ident in frames)


async def asked(pilot) -> KeyPlaceScreen:
    app = pilot.app
    return await wait_for(pilot, lambda: isinstance(app.screen, KeyPlaceScreen) and app.screen.query("#bunker-uri")
                          and app.screen.query("#key-place-result") and app.screen, 20, "the question")


async def phone_code_shown(pilot, dialog: KeyPlaceScreen) -> PhoneSignerScreen:
    """The phone signer's dialog opened from the question, and Enter in its relay field: the code shown."""
    app = pilot.app
    dialog.query_one("#phone").press()
    screen = await wait_for(pilot, lambda: isinstance(app.screen, PhoneSignerScreen)
                            and app.screen.query("#phone-relays") and app.screen.query("#phone-qr") and app.screen, 10)
    await wait_for(pilot, lambda: app.focused is screen.query_one("#phone-relays"), 10, "the relay field's focus")
    await pilot.press("enter")
    await wait_for(pilot, lambda: screen.invitation, 20, "the code")
    return screen


def result_line(dialog) -> str:
    return str(dialog.query_one("#key-place-result").render())


async def test_enter_makes_a_key_here_as_before_and_only_then_the_service_starts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    app = make_app(data, make_config(publish_profile=False), env=first_run_env(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        dialog = await asked(pilot)
        assert not app.service_ready and not (data / "agent.key").exists()  # asked before anything is made
        await wait_for(pilot, lambda: app.focused is dialog.query_one("#create-key"), 10, "the default's focus")
        await wait_for(pilot, lambda: "esc Quit ^s Create a key here" in footer(app), 10, "the dialog's footer")
        await pilot.press("enter")
        await started(pilot)
        assert app.service.runtime.key is not None and app.service.runtime.key.public_key_hex == \
            app.service.identity.agent_pubkey
    assert stat.S_IMODE(os.stat(data / "agent.key").st_mode) == 0o600
    assert not config_file(tmp_path).exists()  # the default needs no config


async def test_not_asked_when_a_key_is_known(tmp_path: Path) -> None:
    app = make_app(tmp_path / "a", make_config(publish_profile=False))  # $DIDACTYL_NSEC
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)  # a question would hold the start
    key_file = tmp_path / "b" / "agent.key"
    key_file.parent.mkdir()
    key_file.write_text(TEST_KEY.nsec() + "\n", "utf-8")
    key_file.chmod(0o600)
    again = make_app(tmp_path / "b", make_config(publish_profile=False), env=first_run_env(tmp_path))
    async with again.run_test(size=SIZE) as pilot:
        await started(pilot)  # no variable, but a key file: nothing is asked
        assert again.service.identity.agent_pubkey == TEST_KEY.public_key_hex


async def test_the_close_key_asks_before_quitting_and_a_quit_makes_nothing_and_says_so(tmp_path: Path,
                                                                                       capfd) -> None:
    data = tmp_path / "data"
    app = make_app(data, make_config(publish_profile=False), env=first_run_env(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        dialog = await asked(pilot)
        await pilot.press("escape")  # asks: a stray Esc does not end a first run
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 10, "the question")
        assert "Quit without a key for the agent?" in screen_text(app) and not app._exit
        await pilot.press("enter")  # the harmless answer has the focus: back to the question
        await wait_for(pilot, lambda: app.screen is dialog, 10, "back to the question")
        await pilot.press("escape")
        await pilot.press("escape")  # Esc on the question is back too
        await wait_for(pilot, lambda: app.screen is dialog, 10, "back again")
        assert not app._exit
        await pilot.press("escape")
        question = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, 10, "asked")
        question.query_one("#confirm").press()  # quit, nothing made
        await wait_for(pilot, lambda: app._exit, 10, "the app to quit")
    assert not app.service_ready and not data.exists()
    # Said on the terminal once the app is gone, by whichever of the app's two shutdowns comes first: the pilot's
    # writes to sys.stderr, the app's own to the real stderr (Textual's redirection is still in place then), so
    # the test reads file descriptor 2 (seen under load: capsys had nothing).
    said = ""
    for _ in range(200):  # bounded: ~10 s
        said += capfd.readouterr().err
        if NO_KEY_MADE in " ".join(said.split()):
            break
        await asyncio.sleep(0.05)
    assert NO_KEY_MADE in " ".join(said.split())


async def test_the_dialogs_keys_come_from_the_action_table(tmp_path: Path) -> None:
    config = make_config(publish_profile=False)
    config.keys = {"close": "f10", "confirm": "f9"}
    app = make_app(tmp_path / "data", config, env=first_run_env(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        dialog = await asked(pilot)
        await wait_for(pilot, lambda: "f10 Quit f9 Create a key here" in footer(app), 10, "the remapped footer")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is dialog and not app._exit  # Esc is not the close key now
        await pilot.press("f9")
        await started(pilot)
    assert (tmp_path / "data" / "agent.key").exists()


async def test_a_bad_uri_is_one_clear_line_and_what_was_pasted_stays_unshown(tmp_path: Path) -> None:
    app = make_app(tmp_path / "data", make_config(publish_profile=False), env=first_run_env(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        dialog = await asked(pilot)
        field = dialog.query_one("#bunker-uri")
        await wait_for(pilot, lambda: app.focused is dialog.query_one("#create-key"), 10, "the default's focus")
        await pilot.press("tab")  # from the default button to the field
        assert app.focused is field
        await pilot.press(*TEST_KEY.nsec(), "enter")  # a secret key pasted where the URI goes
        await wait_for(pilot, lambda: "bunker://" in result_line(dialog), 10, "the line")
        assert field.value == TEST_KEY.nsec() and field.password  # kept, never shown
        assert "-failed" in dialog.query_one("#key-place-result").classes
        assert TEST_KEY.nsec()[:12] not in screen_text(app)
        field.value = "bunker://not-a-key?relay=wss://relay.example"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "signer key" in result_line(dialog), 10, "the second line")
        assert field.value == "bunker://not-a-key?relay=wss://relay.example" and not field.password
        assert app.screen is dialog and app.focused is field and not app.service_ready


async def test_a_pasted_bunker_uri_is_connected_kept_and_used(tmp_path: Path) -> None:
    """The signer asks for approval at a web address first (shown in the dialog), then connects; the app starts with
    the key only in the bunker: the memory gauge says the 40,960-byte bound."""
    data = tmp_path / "data"
    config_file(tmp_path).parent.mkdir(parents=True)
    config_file(tmp_path).write_text("# mine\n[signer]\nrequest_timeout_s = 10.0  # kept\n", "utf-8")
    approve = "https://signer.example/approve?id=1"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as relay, \
            ScriptedBunker([relay.url], AGENT_KEY, secret="single-use", auth_url=approve,
                           auth_methods={"connect"}) as bunker:
        config = make_config(publish_profile=False)
        app = make_app(data, config, env=first_run_env(tmp_path))
        shown = notifications(app)
        async with app.run_test(size=SIZE) as pilot:
            dialog = await asked(pilot)
            dialog.query_one("#bunker-uri").value = bunker.bunker_uri()
            dialog.query_one("#bunker-uri").focus()
            await pilot.press("enter")
            await wait_for(pilot, lambda: approve in result_line(dialog), 20, "the approval link")
            await bunker.approve()
            await started(pilot)
            assert app.service.runtime.key is None and app.service.identity.agent_pubkey == ME
            await wait_for(pilot, lambda: "0/40,960 B" in screen_text(app), 10, "the remote signer's bound")
            await pilot.press("f6")
            editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen, 10)
            editor.text_area.load_text("é" * 100)
            await wait_for(pilot, lambda: "200/40,960 B" in str(editor.query_one(MemoryGauge).render()), 10,
                           "the editor's gauge")
            assert any(AGENT_KEY.npub in message for _, message in shown)
    assert bunker.methods().count("connect") == 1  # the start reused the connection: the secret is single-use
    written = config_file(tmp_path).read_text("utf-8")
    assert written.startswith("# mine\n[signer]\n") and "request_timeout_s = 10.0  # kept" in written
    bunker_line = tomllib.loads(written)["signer"]["bunker"]
    assert bunker_line == config.signer.bunker and "single-use" not in written
    assert BunkerUri.parse(bunker_line) == BunkerUri(bunker.pubkey, (relay.url,))
    assert stat.S_IMODE(os.stat(data / "signer.json").st_mode) == 0o600
    assert not (data / "agent.key").exists()


async def test_a_config_file_that_cannot_be_written_is_said_and_the_signer_used(tmp_path: Path) -> None:
    (tmp_path / "config").write_text("a file where the config folder would be", "utf-8")
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as relay, \
            ScriptedBunker([relay.url], AGENT_KEY, secret="s") as bunker:
        app = make_app(tmp_path / "data", make_config(publish_profile=False), env=first_run_env(tmp_path))
        shown = notifications(app)
        async with app.run_test(size=SIZE) as pilot:
            dialog = await asked(pilot)
            dialog.query_one("#bunker-uri").value = bunker.bunker_uri()
            dialog.query_one("#use-bunker").press()
            await started(pilot)
            assert app.service.identity.agent_pubkey == ME
            [warning] = [message for severity, message in shown if severity == "warning"]
            assert "config.toml" in warning and "bunker = " in warning and "next start asks again" in warning


async def test_the_close_key_stops_a_connection_under_way_and_its_crypto_is_off_the_ui_loop(tmp_path: Path) -> None:
    """No signer answers: the connect request (NIP-44 encrypted and signed by the app's client key) is seen on the
    relay, made on the setup's own thread, never on the UI loop's; the close key stops the wait."""
    earlier = frozenset(setup_threads())
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        uri = BunkerUri(AGENT_KEY.public_key_hex, (relay.url,), "s").to_uri()
        app = make_app(tmp_path / "data", make_config(publish_profile=False), env=first_run_env(tmp_path))
        async with app.run_test(size=SIZE) as pilot, RelayPool([relay.url], **fast_client_kwargs()) as watcher:
            dialog = await asked(pilot)
            dialog.query_one("#bunker-uri").value = uri
            seen: list[object] = []  # kind 24133 is ephemeral: seen live, never stored
            listening: list[str] = []
            watcher.subscribe([{"kinds": [24133], "#p": [ME]}], lambda url, ev: seen.append(ev),
                              on_eose=listening.append)
            await wait_for(pilot, lambda: listening, 10, "the watcher's subscription")
            with LoopIoWatch() as watch:
                dialog.query_one("#use-bunker").press()
                await wait_for(pilot, lambda: seen, 20, "the connect request on the relay")
            assert watch.calls == []
            assert dialog.connecting and "Esc stops" in result_line(dialog)
            await pilot.press("escape")
            await wait_for(pilot, lambda: "Stopped" in result_line(dialog), 10, "stopped")
            assert app.screen is dialog and not dialog.connecting
            await wait_for(pilot, lambda: not setup_threads(earlier), 20, "the connection closed")
            assert not (tmp_path / "data" / "signer.json").exists()


async def test_a_phone_signer_answers_the_code_shown_and_is_kept(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, ScriptedBunker([relay.url], AGENT_KEY) as phone:
        config = make_config(publish_profile=False, urls=[relay.url])
        app = make_app(data, config, env=first_run_env(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            screen = await phone_code_shown(pilot, await asked(pilot))
            invitation = screen.invitation
            assert screen.query_one("#phone-relays").value == relay.url  # the configured relay, taken with Enter
            shown = screen_text(app)
            assert invitation.uri.startswith("nostrconnect://") and "▀" in shown and "nostrconnect://" in shown
            await phone.accept(invitation.uri)  # the phone scanned it
            await started(pilot)
            assert app.service.runtime.key is None and app.service.identity.agent_pubkey == ME
    written = tomllib.loads(config_file(tmp_path).read_text("utf-8"))["signer"]["bunker"]
    assert BunkerUri.parse(written) == BunkerUri(phone.pubkey, (relay.url,)) and config.signer.bunker == written
    assert "connect" not in phone.methods() and "get_public_key" in phone.methods()
    assert not (data / "agent.key").exists()


async def test_the_close_key_stops_waiting_for_a_phone(tmp_path: Path) -> None:
    earlier = frozenset(setup_threads())
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay:
        app = make_app(tmp_path / "data", make_config(publish_profile=False, urls=[relay.url]),
                       env=first_run_env(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            dialog = await asked(pilot)
            await phone_code_shown(pilot, dialog)
            await wait_for(pilot, lambda: "esc Stop waiting" in footer(app), 10, "the phone dialog's footer")
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.screen is dialog, 10, "back to the question")
            assert "No phone signer connected" in result_line(dialog)
            assert app.focused is dialog.query_one("#phone")
            await wait_for(pilot, lambda: not setup_threads(earlier), 20,
                           lambda: f"the invitation withdrawn; still running:\n{thread_stacks(setup_threads(earlier))}")
            assert not app.service_ready
