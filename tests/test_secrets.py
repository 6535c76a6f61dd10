"""The agent's secret key never leaves its 0600 file (or $DIDACTYL_NSEC).

Real flows run with a known key (derived at run time, never written down) and everything a person or a
log could see is searched for every form of it (nsec, hex, both cases, the raw bytes): CLI output
(including ``--json`` and error paths), logging at DEBUG across a service start / save / turn, the text
of every exception raised on bad key input, the TUI's screens and notifications, every file the app
writes under its data dir (except the key file itself), and the committed snapshots.
"""

from __future__ import annotations

import asyncio
import json
import logging
import stat
import tomllib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, OTHER_KEY
from bad_inputs_support import (
    KEY,
    NSEC,
    REPO,
    SECRET_HEX,
    SecretScan,
    check_one_line,
    cli,
    cli_env,
    recording_app,
    secret_windows,
)
from llm_stub import LlmStub, Reply, ToolCall
from tui_support import TEST_KEY, click, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.identity.keystore import LoadedKey, load_agent_key, read_key_file
from didactyl_tui.config import Config
from didactyl_tui.errors import ConfigError, DidactylError, NostrError
from didactyl_tui.nostr import nip19
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.service.app import AppService
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen
from didactyl_tui.tui.widgets.self_pane import short_key
from didactyl_tui.tui.widgets.tool_call_entry import ToolCallEntry

SCAN = SecretScan([SECRET_HEX])
SIZE = (130, 40)


# This process's model helper is warm before any test's deadline (conftest's warm_litellm).
pytestmark = pytest.mark.usefixtures("warm_litellm")


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def scan_data_dir(data: Path, scan: SecretScan, *, key_file_allowed: bool) -> list[str]:
    """Every file the app wrote, as bytes; only ``agent.key`` may hold the key. Returns the names scanned."""
    names = []
    for path in files_under(data):
        rel = str(path.relative_to(data))
        if rel == "agent.key":
            assert key_file_allowed, "a key file was written although the key came from $DIDACTYL_NSEC"
            continue
        scan.check_bytes(f"{rel} in the data dir", path.read_bytes())
        names.append(rel)
    return names


def record_texts(records: list[logging.LogRecord]) -> str:
    formatter = logging.Formatter("%(levelname)s %(name)s: %(message)s")
    return "\n".join(formatter.format(r) for r in records)


def assert_is_private(path: Path) -> None:
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path} is {stat.S_IMODE(path.stat().st_mode):04o}"


# --- keys and their errors ----------------------------------------------------------------------------------


def bad_key_values() -> dict[str, str]:
    """Near misses of the test key, as a person might paste them: each must be refused without being quoted."""
    flipped_last = NSEC[:-1] + ("q" if NSEC[-1] != "q" else "p")
    return {
        "nsec-bad-checksum": flipped_last,
        "nsec-truncated": NSEC[:-6],
        "nsec-bad-char": NSEC[:20] + "b" + NSEC[21:],
        "nsec-mixed-case": NSEC[:30] + NSEC[30:].upper(),
        "nsec-in-a-sentence": f"my key is {NSEC} ok",
        "nsec-with-quotes": f'"{NSEC}',
        "hex-short": SECRET_HEX[:-1],
        "hex-long": SECRET_HEX + "0",
        "hex-not-hex": SECRET_HEX[:-1] + "g",
        "hex-split": SECRET_HEX[:32] + " " + SECRET_HEX[32:],
        "hex-out-of-range": "f" * 64,
        "npub-as-nsec": KEY.npub,
    }


def exception_texts(exc: BaseException) -> list[str]:
    """All an exception could show: str, repr, its one line, the formatted traceback, and every exception
    chained to it (shown or suppressed)."""
    texts = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    if isinstance(exc, DidactylError):
        texts += [exc.one_line(), exc.message, exc.title]
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        texts += [str(current), repr(current), *map(str, current.args)]
        current = current.__cause__ or current.__context__
    return texts


def assert_not_quoted(texts: list[str], bad_value: str, where: str) -> None:
    body = NSEC.split("1", 1)[1]  # the bech32 data after the "nsec" prefix and its separator
    windows = secret_windows(SECRET_HEX) + secret_windows(body)
    # Booleans only in the asserts: pytest would print the compared strings, i.e. the key, on a failure.
    for text in texts:
        SCAN.check_text(where, text)
        quoted = len(bad_value) >= 12 and bad_value != KEY.npub and bad_value in text
        assert not quoted, f"{where} quotes the bad key value"
        piece = any(w in text for w in windows)
        assert not piece, f"{where} quotes a 12-character piece of the secret"


def test_secret_key_is_redacted_in_repr_and_str() -> None:
    loaded = LoadedKey(KEY, "env", None)
    for text in (repr(KEY), str(KEY), f"{KEY!r}", f"{KEY}", repr(loaded), str(loaded), repr([KEY]), repr({"k": KEY})):
        SCAN.check_text("a repr", text)
    right_strings = KEY.secret_hex() == SECRET_HEX and KEY.nsec() == NSEC
    assert right_strings  # the scan looks for the strings the app would print
    assert SCAN.find_in_text(f"xx{NSEC}xx") and SCAN.find_in_text(SECRET_HEX.upper())
    assert SCAN.find_in_bytes(b"\x00" + bytes.fromhex(SECRET_HEX) + b"\x00")


@pytest.mark.parametrize("name", list(bad_key_values()))
def test_bad_key_input_errors_never_quote_the_key(name: str, tmp_path: Path) -> None:
    bad = bad_key_values()[name]
    attempts: dict[str, Callable[[], Any]] = {
        "SecretKey.parse": lambda: SecretKey.parse(bad),
        "SecretKey.from_hex": lambda: SecretKey.from_hex(bad),
        "SecretKey.from_nsec": lambda: SecretKey.from_nsec(bad),
        "nip19.decode_nsec": lambda: nip19.decode_nsec(bad),
        "load_agent_key($DIDACTYL_NSEC)": lambda: load_agent_key(tmp_path / "env-data", {"DIDACTYL_NSEC": bad}),
    }
    key_file = tmp_path / "file-data" / "agent.key"
    key_file.parent.mkdir(mode=0o700)
    key_file.write_text(bad + "\n")
    key_file.chmod(0o600)
    attempts["read_key_file"] = lambda: read_key_file(key_file)
    attempts["load_agent_key(key file)"] = lambda: load_agent_key(key_file.parent, {})
    for where, attempt in attempts.items():
        with pytest.raises(DidactylError) as info:
            attempt()
        assert isinstance(info.value, NostrError | ConfigError), where
        assert_not_quoted(exception_texts(info.value), bad, f"{where} on {name}")
        check_one_line(info.value.one_line(), SCAN)
    untouched = key_file.read_text() == bad + "\n"
    assert untouched  # refused, never rewritten or "repaired"

    # The service and the CLI refuse it the same way, in one line.
    async def start() -> None:
        await AppService(Config(), data_dir=tmp_path / "svc", env={"DIDACTYL_NSEC": bad}).start()

    with pytest.raises(NostrError) as info:
        asyncio.run(start())
    assert_not_quoted(exception_texts(info.value), bad, f"AppService.start on {name}")
    for argv in (["whoami"], ["prompt", "--json"], ["memory", "show", "--type", "short_term", "--json"]):
        result = cli(argv, cli_env(tmp_path, DIDACTYL_NSEC=bad))
        assert result.code == 2 and result.stdout == ""
        line = check_one_line(result.line, SCAN)
        assert "$DIDACTYL_NSEC" in line
        assert_not_quoted([result.stdout, result.stderr], bad, f"didactyl {' '.join(argv)} on {name}")


# --- the key file -------------------------------------------------------------------------------------------


def test_key_file_is_0600_and_a_readable_one_is_refused(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    made = cli(["keygen"], env)
    assert made.code == 0, made.stderr
    data = Path(env["DIDACTYL_DATA_DIR"])
    key_file = data / "agent.key"
    assert_is_private(key_file)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    generated = SecretKey.parse(key_file.read_text())
    scan = SecretScan([generated.secret_hex(), SECRET_HEX])
    npub, pubkey = made.stdout.split()
    assert (npub, pubkey) == (generated.npub, generated.public_key_hex)

    outputs = [made]
    for argv in (["whoami"], ["whoami", "--json"], ["keygen"]):
        outputs.append(cli(argv, env))
    assert outputs[1].stdout.split() == [npub, pubkey]
    assert json.loads(outputs[2].stdout)["pubkey"] == pubkey
    assert outputs[3].code == 2 and "--force" in outputs[3].line
    for result in outputs:
        scan.check_text("keygen/whoami output", result.stdout + result.stderr)

    for mode in (0o640, 0o604, 0o644, 0o660):
        key_file.chmod(mode)
        refused = cli(["whoami"], env)
        assert refused.code == 2 and refused.stdout == ""
        line = check_one_line(refused.line, scan)
        assert f"chmod 600 {key_file}" in line and f"{mode:04o}" in line
        with pytest.raises(ConfigError) as info:
            asyncio.run(AppService(Config(), data_dir=data, env={}).start())
        assert f"chmod 600 {key_file}" in str(info.value)
        for text in exception_texts(info.value):
            scan.check_text("the refusal", text)
    key_file.chmod(0o600)
    assert cli(["whoami"], env).code == 0


# --- the CLI ------------------------------------------------------------------------------------------------


async def test_cli_commands_print_only_public_data(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        config = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                  'timeout_s = 5\nmax_retries = 0\n[relays]\nembedded_port = 0\ntimeout_s = 2.0\n'
                  '[memory]\nbackend = "none"\n')
        env = cli_env(tmp_path, config, DIDACTYL_NSEC=NSEC, STUB_KEY="sk-stub-not-real")
        stub.script(
            Reply.tools(ToolCall("my_npub", "{}"), ToolCall("my_pubkey", "{}"), ToolCall("agent_identity", "{}")),
            Reply.tools(ToolCall("memory_save", json.dumps({"type": "short_term", "content": "likes tea"}))),
            Reply.text_reply("Done: I know who I am."),
            Reply.text_reply("Plain answer."),
            Reply.server_error(),
        )
        runs: list[tuple[list[str], str]] = [
            (["whoami"], ""),
            (["whoami", "--json"], ""),
            (["memory", "save", "--type", "long_term", "--content", "the user's cat is Miso", "--json"], ""),
            (["memory", "save", "--type", "long_term", "--file", "-"], "notes from stdin\n"),
            (["memory", "show", "--type", "long_term", "--json"], ""),
            (["memory", "show", "--type", "long_term"], ""),
            (["prompt", "--message", "who are you?", "--json"], ""),
            (["prompt", "--message", "who are you?"], ""),
            (["chat", "--message", "who are you? remember tea", "--json"], ""),
            (["memory", "show", "--type", "short_term", "--json"], ""),
            (["chat", "--message", "again"], ""),
            (["chat", "--message", "fail please"], ""),
        ]
        results = []
        for argv, stdin in runs:
            results.append((argv, await asyncio.to_thread(cli, argv, env, stdin)))
    for argv, result in results:
        SCAN.check_text(f"didactyl {' '.join(argv)}", result.stdout + result.stderr)
    by_cmd = {" ".join(argv): result for argv, result in results}
    assert by_cmd["whoami"].stdout.split() == [KEY.npub, KEY.public_key_hex]
    assert json.loads(by_cmd["whoami --json"].stdout) == {
        "npub": KEY.npub, "pubkey": KEY.public_key_hex, "source": "env", "key_file": None}
    chat = json.loads(by_cmd["chat --message who are you? remember tea --json"].stdout)
    assert chat["reply"] == "Done: I know who I am."
    results_text = json.dumps(chat["tool_calls"])
    assert KEY.npub in results_text and KEY.public_key_hex in results_text  # public data is there...
    assert json.loads(by_cmd["memory show --type short_term --json"].stdout)["content"] == "likes tea"
    prompt = json.loads(by_cmd["prompt --message who are you? --json"].stdout)
    assert any(KEY.npub in (s["content"] or "") for s in prompt["sections"])  # ...the secret is not
    failed = by_cmd["chat --message fail please"]
    assert failed.code == 1 and check_one_line(failed.line, SCAN).startswith("didactyl: LLM server error")
    assert all(result.code == 0 for argv, result in results if argv[-1] != "fail please"), results
    # $DIDACTYL_NSEC wins: no key file was written, and nothing else holds the key.
    scanned = scan_data_dir(Path(env["DIDACTYL_DATA_DIR"]), SCAN, key_file_allowed=False)
    assert any(name.startswith("conversations") for name in scanned) and "relay.sqlite3" in scanned


# --- the service, with logging at DEBUG ---------------------------------------------------------------------


def stub_config(stub: LlmStub, **overrides: Any) -> Config:
    cfg = make_config(llm_base_url=stub.base_url, **overrides)
    cfg.memory.backend = "recall"  # its index is one more file that must not hold the key
    return cfg


async def drain(service: AppService, session: str, message: str) -> list[Any]:
    return [event async for event in service.chat.run_turn(session, message)]


async def test_first_run_service_logs_and_files_hold_no_secret(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    data = tmp_path / "data"
    env = {"DIDACTYL_TEST_LLM_KEY": "sk-stub-not-real"}  # no $DIDACTYL_NSEC: the first run creates the key file
    async with LlmStub() as stub:
        stub.script(
            Reply.tools(ToolCall("memory_save", json.dumps({"type": "short_term", "content": "prefers tea"})),
                        ToolCall("agent_identity", "{}"), ToolCall("my_memory", "{}")),
            Reply.text_reply("Saved."),
            Reply.unauthorized(echo_key=True),
            Reply.tools(ToolCall("memory_save", '{"type": "short_term", "content": '), ToolCall("nope", "{}")),
            Reply.text_reply("Recovered."),
        )
        service = AppService(stub_config(stub), data_dir=data, env=env)
        async with service:
            key_file = data / "agent.key"
            assert_is_private(key_file)
            assert stat.S_IMODE(data.stat().st_mode) == 0o700
            secret = SecretKey.parse(key_file.read_text())
            scan = SecretScan([secret.secret_hex()])
            await service.documents.save(DocumentKey.LONG_TERM, "long-term notes")
            session = await service.chat.new_session()
            events = await drain(service, session, "remember that I prefer tea")
            assert type(events[-1]).__name__ == "TurnFinished"
            failed = await drain(service, session, "and now?")
            assert type(failed[-1]).__name__ == "TurnFailed"
            check_one_line(failed[-1].message, scan)
            assert "sk-stub-not-real" not in failed[-1].message
            recovered = await drain(service, session, "try again")
            assert type(recovered[-1]).__name__ == "TurnFinished"
            await service.prompt.dry_run(session, "what do you see?")
            service.model.set("openai/stub-model")  # written to state.toml
            for event in (*events, *failed, *recovered):
                scan.check_text(f"the agent event {type(event).__name__}", repr(event))
            for message in (await service.chat.session_messages(session)):
                scan.check_text("a stored message", json.dumps(message))
        # A second start reads the file (the "file" source), then shows the same public identity.
        again = AppService(stub_config(stub), data_dir=data, env=env)
        async with again:
            assert again.identity.agent_pubkey == secret.public_key_hex
            snapshot = again.identity.snapshot()
            scan.check_text("the self context", repr(snapshot))
    logs = record_texts(caplog.records)
    assert "didactyl" in logs and len(caplog.records) > 20, "DEBUG logging was not captured"
    scan.check_text("the log at DEBUG", logs)
    names = scan_data_dir(data, scan, key_file_allowed=True)
    assert "state.toml" in names and any(name.startswith("relay.sqlite3") for name in names)
    state_toml = (data / "state.toml").read_text()
    assert state_toml.startswith('model = "openai/stub-model"\n')  # and which identity events are ours (ids)
    assert set(tomllib.loads(state_toml)) <= {"model", "model_api_base", "model_api_key_env", "model_no_key",
                                              "identity_known", "identity_intent"}


# --- the TUI ------------------------------------------------------------------------------------------------


async def test_tui_screens_notifications_and_files_hold_no_secret(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    screens: dict[str, str] = {}
    async with LlmStub() as stub:
        stub.script(
            Reply.tools(ToolCall("agent_identity", "{}"), ToolCall("my_npub", "{}"), ToolCall("my_pubkey", "{}")),
            Reply.text_reply("I am the agent above."),
            Reply.unauthorized(echo_key=True),
        )
        config = make_config(llm_base_url=stub.base_url, short_limit=60)
        config.keys = {"no_such_action": "f12"}  # a warning notification on start
        app = recording_app(tmp_path, config, make_env(DIDACTYL_NSEC=NSEC))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen

            def snap(name: str) -> None:
                screens[name] = app.export_screenshot()
                screens[name + " (text)"] = screen_text(app)

            snap("main screen")
            await pilot.press("f3")
            await wait_for(pilot, lambda: main.self_panes() and main.self_panes()[0].filled, 10, "the self pane")
            await pilot.wait_for_scheduled_animations()
            snap("self pane")
            self_text = screens["self pane (text)"]
            assert short_key(KEY.npub, 14, 8) in self_text, self_text  # the pane shows public data

            main.chat_input.focus()
            await pilot.press(*"who are you?", "enter")
            await wait_for(pilot, lambda: main.conversation.last_reply() == "I am the agent above."
                           and not main.streaming, 30, "the reply")
            for entry in main.conversation.query(ToolCallEntry):
                entry.collapsed = False
            await wait_for(pilot, lambda: KEY.public_key_hex[:20] in screen_text(app), 10, "the unfolded tool calls")
            snap("conversation with tool calls")
            assert KEY.public_key_hex[:20] in screens["conversation with tool calls (text)"]

            await pilot.press(*"and again", "enter")  # 401 echoing the key: an inline error
            await wait_for(pilot, lambda: not main.streaming and main.chat_input.text == "and again", 30, "error")
            await pilot.wait_for_scheduled_animations()
            snap("inline LLM error")

            main.chat_input.clear()
            await pilot.press("f5")
            await wait_for(pilot, lambda: main.inspectors() and main.inspectors()[0].entries, 10, "the dry run")
            await pilot.wait_for_scheduled_animations()
            snap("prompt inspector")
            main.inspector.assembly_tree.focus()
            await pilot.press("o")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "InspectorDetailScreen", 10, "detail")
            app.screen.query_one("AssemblyTree").root.expand_all()
            await pilot.wait_for_scheduled_animations()
            snap("inspector detail")
            await pilot.press("escape")

            await pilot.press("f6")
            editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
            editor.text_area.load_text("the user's cat is called Miso")
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: "accepted by" in screen_text(app), 10, "the save")
            snap("memory editor after a save")
            editor.text_area.load_text("x" * 61)
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: "Not saved" in screen_text(app), 10, "the refusal")
            await pilot.wait_for_scheduled_animations()
            snap("memory editor refusing")
            await click(pilot, "#close")  # the refused text is unsaved: the editor asks first
            await wait_for(pilot, lambda: type(app.screen).__name__ == "UnsavedChangesScreen")
            snap("unsaved changes question")
            await click(pilot, "#discard")
            await wait_for(pilot, lambda: app.screen is main)

            app.theme = "didactyl-light"  # remembered in state.toml
            await pilot.press("ctrl+s")  # export the conversation as markdown
            await wait_for(pilot, lambda: any(n.startswith("Exported") for n in app.notes), 10, "the export")
            await wait_for(pilot, lambda: (tmp_path / "state.toml").exists(), 10, "state.toml")
            await pilot.wait_for_scheduled_animations()
            snap("main screen with notifications")

    assert any("no_such_action" in n for n in app.notes) and any("Not saved" in n or "over limit" in n.lower()
                                                                    for n in app.notes), app.notes
    for name, text in screens.items():
        SCAN.check_text(f"the screen '{name}'", text)
    for note in app.notes:
        SCAN.check_text("a notification", note)
        check_one_line(" ".join(note.split()), SCAN)
    SCAN.check_text("the log at DEBUG", record_texts(caplog.records))
    names = scan_data_dir(tmp_path, SCAN, key_file_allowed=False)
    assert "state.toml" in names and any(name.startswith("exports/") for name in names), names


async def test_tui_with_a_damaged_key_says_so_in_one_line(tmp_path: Path) -> None:
    damaged = bad_key_values()["nsec-bad-checksum"]
    app = recording_app(tmp_path, make_config(), make_env(DIDACTYL_NSEC=damaged))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.notes, 15, "the refusal")
        await pilot.wait_for_scheduled_animations()
        shown = screen_text(app)
        svg = app.export_screenshot()
    assert not app.service_ready
    assert any("DIDACTYL_NSEC" in n for n in app.notes), app.notes
    assert "DIDACTYL_NSEC" in " ".join(shown.split())
    assert_not_quoted([shown, svg, *app.notes], damaged, "the TUI")


# --- the committed snapshots --------------------------------------------------------------------------------


def test_committed_snapshots_hold_no_secret() -> None:
    snapshots = sorted(p for p in (REPO / "tests").glob("**/__snapshots__/**/*")
                       if p.is_file() and "node_modules" not in p.parts)  # beside each snapshot test
    assert [p for p in snapshots if p.suffix == ".svg"], "no committed snapshots found"
    keys = SecretScan([k.secret_hex() for k in (TEST_KEY, AGENT_KEY, ADMIN_KEY, OTHER_KEY, KEY)])
    for path in snapshots:
        keys.check_bytes(str(path.relative_to(REPO)), path.read_bytes())
