"""The bad-input catalogue (docs/bad-inputs.md): every row is a test here, under the same id.

Each row feeds one bad input to the real app — the CLI (in-process, through ``cli.run``), the config loader,
the key file, the TUI (Pilot), real relays that misbehave, and the OpenAI-compatible LLM stub through the
service's ``run_turn`` — and checks that the user sees exactly the table's line: one readable line, no
traceback, no secret. Where more is promised (nothing published, text kept, conversation intact, retry
works), the row checks that too.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bad_inputs_support import (
    KEY,
    NSEC,
    SECRET_HEX,
    RecordingApp,
    SecretScan,
    check_one_line,
    cli,
    cli_env,
    config_file,
    matches_catalogue,
    read_catalogue,
    recording_app,
)
from fault_relay import HostileRelay, SilentServer
from llm_stub import LlmStub, Reply, ToolCall
from relay_servers import ScriptedConnection, ScriptedRelay, free_port
from tui_support import make_config, make_env, screen_text, started, wait_for

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.tools.registry import build_tool, unknown_tool_message
from didactyl_tui.agent.turn.events import ToolCallFinished, TurnFailed, TurnFinished
from didactyl_tui.service.app import AppService
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen

SCAN = SecretScan([SECRET_HEX])
SIZE = (130, 40)


def row(row_id: str, *values: Any) -> Any:
    return pytest.param(row_id, *values, id=row_id)


# This process's model helper is warm before any test's deadline (conftest's warm_litellm).
pytestmark = pytest.mark.usefixtures("warm_litellm")


def seen(result: Any) -> str:
    """The one stderr line of a failed command, checked."""
    return check_one_line(result.line, SCAN)


# --- CLI ----------------------------------------------------------------------------------------------------


def _no_memory_published(env: dict[str, str]) -> None:
    shown = cli(["memory", "show", "--type", "short_term", "--json"], env)
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["event_id"] is None


CLI_ROWS = [
    row("cli-unknown-command", ["frobnicate"], 2),
    row("cli-attach-bad-address", ["attach", "nprofile1qqqqqqqq"], 2),
    row("cli-attach-bad-relay", ["attach", KEY.npub, "--relay", "http://relay.example"], 2),
    row("cli-bad-type", ["memory", "show", "--type", "mid_term"], 2),
    row("cli-history-no-type", ["memory", "history"], 2),
    row("cli-memory-type-soul", ["memory", "show", "--type", "soul"], 2),
    row("cli-status-bad-type", ["memory", "status", "--type", "mid_term"], 2),
    row("cli-content-and-file", ["memory", "save", "--type", "long_term", "--content", "x", "--file", "notes.md"], 2),
    row("cli-no-content", ["memory", "save", "--type", "long_term"], 2),
    row("cli-missing-file", ["memory", "save", "--type", "long_term", "--file", "{tmp}/missing.md"], 2),
    row("cli-unreadable-file", ["memory", "save", "--type", "long_term", "--file", "{tmp}/a-folder"], 2),
    row("cli-non-utf8-file", ["memory", "save", "--type", "long_term", "--file", "{tmp}/latin1.md"], 2),
    row("cli-over-limit", ["memory", "save", "--type", "short_term", "--content", "x" * 8001], 2),
    row("cli-over-nip44-bytes", ["memory", "save", "--type", "long_term", "--content", "€" * 25000], 2),
    row("cli-empty-message", ["chat", "--message", "   "], 2),
    row("cli-unknown-session", ["prompt", "--session", "no-such-chat"], 2),
    row("cli-sessions-unknown-id", ["sessions", "show", "feedface"], 2),
    row("cli-bad-port", ["relay", "--port", "70000"], 2),
    row("cli-config-path-missing", ["--config", "{tmp}/nope.toml", "prompt"], 2),
    row("cli-config-path-folder", ["--config", "{tmp}/a-folder", "prompt"], 2),
]


@pytest.mark.parametrize(("row_id", "argv", "code"), CLI_ROWS)
def test_cli_rows(row_id: str, argv: list[str], code: int, tmp_path: Path) -> None:
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "latin1.md").write_bytes("café crème".encode("latin-1"))
    env = cli_env(tmp_path, DIDACTYL_NSEC=NSEC)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    result = cli(argv, env)
    assert result.code == code, result.stderr
    assert result.stdout == ""
    matches_catalogue(row_id, seen(result), {str(tmp_path): "<tmp>"})
    if argv[:2] == ["memory", "save"]:
        _no_memory_published(env)  # bad input fails before anything is signed or sent


KEY_ROWS = [
    row("key-env-short-hex", SECRET_HEX[:-1], 2),
    row("key-env-bad-checksum", NSEC[:-1] + ("q" if NSEC[-1] != "q" else "p"), 2),
    row("key-env-npub", KEY.npub, 2),
    row("key-file-loose-mode", "mode 0644", 2),
    row("key-file-garbage", "hello, I am not a key\n", 2),
    row("key-file-empty", "", 2),
    row("key-file-not-utf8", b"\xff\xfe\x00nsec", 2),
    row("key-none-yet", None, 1),
    row("key-keygen-exists", "keygen", 2),
]


@pytest.mark.parametrize(("row_id", "bad", "code"), KEY_ROWS)
def test_key_rows(row_id: str, bad: Any, code: int, tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    data = Path(env["DIDACTYL_DATA_DIR"])
    key_file = data / "agent.key"
    argv = ["whoami"]
    if row_id.startswith("key-env-"):
        env["DIDACTYL_NSEC"] = bad
    elif row_id == "key-file-loose-mode":
        assert cli(["keygen"], env).code == 0
        key_file.chmod(0o644)
    elif row_id == "key-keygen-exists":
        assert cli(["keygen"], env).code == 0
        argv = ["keygen"]
    elif bad is not None:
        data.mkdir(mode=0o700)
        key_file.write_bytes(bad if isinstance(bad, bytes) else bad.encode())
        key_file.chmod(0o600)
    before = key_file.read_bytes() if key_file.exists() else None
    result = cli(argv, env)
    assert result.code == code and result.stdout == ""
    matches_catalogue(row_id, seen(result), {str(tmp_path): "<tmp>"})
    assert (key_file.read_bytes() if key_file.exists() else None) == before  # never rewritten or created


# --- config ---------------------------------------------------------------------------------------------------

CONFIG_ROWS = [
    row("config-invalid-toml", '[llm]\nmodel = "openai/x"\ntimeout_s = = 5\n'),
    row("config-unknown-section", '[llm]\nmodel = "openai/x"\n\n[relay]\nurls = []\n'),
    row("config-unknown-key", '[llm]\nmodel = "openai/x"\ntemperature = 0.2\n'),
    row("config-wrong-type", '[llm]\nmodel = "openai/x"\ntimeout_s = "fast"\n'),
    row("config-out-of-range", '[relays]\nembedded_port = 99999\n'),
    row("config-bad-relay-url", '[relays]\nurls = ["https://relay.example.com"]\n'),
    row("config-not-finite", '[llm]\nmodel = "openai/x"\ntimeout_s = inf\n'),
    row("config-broken-relay-url", '[relays]\nurls = ["ws://[::1"]\n'),
    row("config-bad-backend", '[memory]\nbackend = "mem0"\n'),
    row("config-no-relays", '[relays]\nembedded = false\nurls = []\n'),
    row("config-bad-admin-pubkey", '[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n\n'
        '[admin]\npubkey = "npub1notreallyakey"\n'),
    row("config-bad-soul-file", '[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n[soul]\n'
        'file = "missing-soul.md"\n'),
    row("config-env-bad-relays", "DIDACTYL_RELAYS=http://relay.example.com"),
]


@pytest.mark.parametrize(("row_id", "text"), CONFIG_ROWS)
def test_config_rows(row_id: str, text: str, tmp_path: Path) -> None:
    if row_id == "config-env-bad-relays":
        name, value = text.split("=", 1)
        env = cli_env(tmp_path, DIDACTYL_NSEC=NSEC, **{name: value})
    else:
        env = cli_env(tmp_path, text, DIDACTYL_NSEC=NSEC)
    path = str(config_file(env))
    result = cli(["prompt", "--json"], env)
    assert result.code == 2 and result.stdout == ""
    line = seen(result)
    matches_catalogue(row_id, line, {str(tmp_path): "<tmp>"})
    if row_id != "config-env-bad-relays":
        # A bad config value names the file, the key and what is wrong (issue 3).
        assert path in line, f"the message does not name the config file: {line}"


CONFIG_WARNING_ROWS = [
    row("config-bad-contact", '[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n[agent]\n'
        'contacts = ["not-a-pubkey"]\n'),
]


@pytest.mark.parametrize(("row_id", "text"), CONFIG_WARNING_ROWS)
async def test_config_warning_rows(row_id: str, text: str, tmp_path: Path) -> None:
    # A value the app can do without: a warning line, and the command runs on.
    env = cli_env(tmp_path, text, DIDACTYL_NSEC=NSEC)
    path = str(config_file(env))
    result = await asyncio.to_thread(cli, ["prompt", "--json"], env)
    assert result.code == 0 and json.loads(result.stdout)["sections"]
    warning = seen(result)
    matches_catalogue(row_id, warning, {str(tmp_path): "<tmp>"})
    assert path in warning, f"the warning does not name the config file: {warning}"


# --- relays ------------------------------------------------------------------------------------------------------


async def _garbage(conn: ScriptedConnection) -> None:
    """Answer everything with frames no relay should send."""
    junk = ["not json at all", "[]", '["OK"]', '["OK", 5, "yes"]', '{"OK": true}', '["EVENT"]', '["EOSE"]',
            "[" * 5000, b"\x00\xff binary"]
    while True:
        await conn.recv()
        for frame in junk:
            await conn.send_raw(frame)


def relay_config(urls: list[str], *, embedded: bool = True, timeout: float = 1.0) -> str:
    return (f"[relays]\nembedded = {str(embedded).lower()}\nembedded_port = 0\ntimeout_s = {timeout}\n"
            f"urls = {json.dumps(urls)}\n[memory]\nbackend = \"none\"\n[agent]\npublish_profile = false\n")


RELAY_ROWS = [
    row("relay-unreachable", "dead", True, 0),
    row("relay-none-accepts", "dead", False, 1),
    row("relay-silent", "silent", True, 0),
    row("relay-garbage", "garbage", True, 0),
    row("relay-ok-false", "ok-false", True, 0),
    row("relay-reason-escapes", "escapes", True, 0),
]
# A relay's reason that would write the clipboard (OSC 52), clear the screen and draw text if printed raw.
HOSTILE_REASON = "blocked: \x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x1b[H\rall good [/] \x1b]0;pwned\x07"


@pytest.mark.parametrize(("row_id", "kind", "embedded", "code"), RELAY_ROWS)
async def test_relay_rows(row_id: str, kind: str, embedded: bool, code: int, tmp_path: Path) -> None:
    servers: list[Any] = []
    if kind == "dead":
        url = f"ws://127.0.0.1:{free_port()}"
    else:
        server = {"silent": SilentServer, "garbage": lambda: ScriptedRelay(_garbage),
                  "ok-false": lambda: HostileRelay(ok_answer=(False, "blocked: not on the allow list")),
                  "escapes": lambda: HostileRelay(ok_answer=(False, HOSTILE_REASON))}[kind]()
        await server.start()
        servers.append(server)
        url = server.url
    try:
        env = cli_env(tmp_path, relay_config([url], embedded=embedded), DIDACTYL_NSEC=NSEC)
        result = await asyncio.to_thread(
            cli, ["memory", "save", "--type", "short_term", "--content", "the user likes tea"], env)
        shown = await asyncio.to_thread(cli, ["memory", "show", "--type", "short_term", "--json"], env)
    finally:
        for server in servers:
            await server.stop()
    assert result.code == code, result.stderr
    for text in (result.stdout, result.stderr):
        SCAN.check_text(row_id, text)
    for warning in result.stderr.splitlines():
        check_one_line(warning, SCAN)
    if code == 0:
        # The save went through the relay that works; the bad one is named with its verdict. No crash.
        line = check_one_line(result.stdout, SCAN)
        assert json.loads(shown.stdout)["content"] == "the user likes tea"
    else:
        line = seen(result)
    matches_catalogue(row_id, line, {url: "<bad relay>"})


# --- LLM (the stub, through the service's run_turn) ------------------------------------------------------------


async def _turn(service: AppService, session: str, message: str) -> list[Any]:
    return [event async for event in service.chat.run_turn(session, message)]


def _failed_line(events: list[Any]) -> str:
    last = events[-1]
    assert isinstance(last, TurnFailed), last
    return check_one_line(f"{last.title}: {last.message}", SCAN)


def _raising_tool() -> Any:
    def flaky_lookup(query: str) -> str:
        """Look something up (this test tool always fails)."""
        raise RuntimeError("the lookup service is on fire")

    return build_tool(flaky_lookup)


LLM_FAILURE_ROWS = [
    row("llm-rate-limited", [Reply.rate_limited(7)], {}),
    row("llm-server-error", [Reply.server_error()], {}),
    row("llm-unauthorized", [Reply.unauthorized(echo_key=True)], {}),
    row("llm-timeout", [Reply.hang(4)], {"timeout_s": 1.0}),
    row("llm-context-too-long", [Reply.context_too_long()], {}),
    row("llm-cut-off", [Reply.text_reply("Half an ans wer", chunks=["Half ", "an ", "ans", "wer"],
                                         fail_after_chunks=3)], {}),
    row("llm-unreachable", [], {"api_base": "unreachable"}),
    row("llm-no-model", [], {"model": ""}),
    row("llm-missing-key", [], {"api_key_env": "DIDACTYL_TEST_MISSING_KEY"}),
]


@pytest.mark.parametrize(("row_id", "script", "llm_overrides"), LLM_FAILURE_ROWS)
async def test_llm_failure_rows(row_id: str, script: list[Reply], llm_overrides: dict[str, Any],
                                tmp_path: Path) -> None:
    async with LlmStub() as stub:
        config = make_config(llm_base_url=stub.base_url, publish_profile=False)
        dead_base = f"http://127.0.0.1:{free_port()}/v1"
        for name, value in llm_overrides.items():
            setattr(config.llm, name, dead_base if value == "unreachable" else value)
        env = make_env(DIDACTYL_NSEC=NSEC, DIDACTYL_TEST_LLM_KEY="sk-stub-secret-123456")
        async with AppService(config, data_dir=tmp_path, env=env) as service:
            session = await service.chat.new_session()
            if row_id not in ("llm-no-model", "llm-unreachable", "llm-missing-key"):
                stub.script(Reply.text_reply("Hello."))
                assert isinstance((await _turn(service, session, "hi"))[-1], TurnFinished)
            before = await service.chat.session_messages(session)
            stub.script(*script)
            failed = await _turn(service, session, "tell me more")
            line = _failed_line(failed)
            assert "sk-stub-secret-123456" not in line  # the API key is never shown either
            matches_catalogue(row_id, line, {stub.base_url: "<llm>", dead_base: "<llm>"})
            # The conversation is intact: the failed turn left only the user's message and, when cut off, the reply
            # so far, both marked (shown, never sent to the model again).
            so_far = [{"role": "assistant", "content": "Half an", "status": "interrupted"}] if row_id == "llm-cut-off" \
                else []
            assert (await service.chat.session_messages(session)) == [
                *before, {"role": "user", "content": "tell me more", "status": "failed"}, *so_far]
            # Retry works: the same message again, once the cause is gone.
            if row_id == "llm-no-model":
                service.model.set("openai/stub-model")
            elif row_id == "llm-unreachable":
                config.llm.api_base = stub.base_url
            elif row_id == "llm-missing-key":
                config.llm.api_key_env = "DIDACTYL_TEST_LLM_KEY"
            stub.script(Reply.text_reply("Here is more."))
            retried = await _turn(service, session, "tell me more")
            assert isinstance(retried[-1], TurnFinished) and retried[-1].reply == "Here is more."
            messages = await service.chat.session_messages(session)
            assert messages[:len(before)] == before
            assert [(m["content"], m.get("status")) for m in messages[len(before):]] == [
                ("tell me more", "failed"), *[(m["content"], m["status"]) for m in so_far], ("tell me more", None),
                ("Here is more.", None)]
            # The model saw the message once: the failed one is never sent again.
            assert [m["content"] for m in stub.requests[-1].messages].count("tell me more") == 1


LLM_TOOL_ROWS = [
    row("llm-malformed-tool-json", ToolCall("memory_save", '{"type": "short_term", "content": '), None),
    row("llm-unknown-tool", ToolCall("launch_rockets", '{"target": "moon"}'), None),
    row("llm-bad-tool-argument", ToolCall("memory_save", '{"type": "mid_term", "content": "x"}'), None),
    row("llm-tool-raises", ToolCall("flaky_lookup", '{"query": "weather"}'), _raising_tool),
    row("llm-tool-refuses", ToolCall("memory_save", json.dumps({"type": "short_term", "content": "y" * 8001})),
        None),
]


@pytest.mark.parametrize(("row_id", "call", "extra_tool"), LLM_TOOL_ROWS)
async def test_llm_tool_rows(row_id: str, call: ToolCall, extra_tool: Callable[[], Any] | None,
                             tmp_path: Path) -> None:
    async with LlmStub() as stub:
        config = make_config(llm_base_url=stub.base_url, publish_profile=False)
        async with AppService(config, data_dir=tmp_path, env=make_env(DIDACTYL_NSEC=NSEC)) as service:
            if extra_tool is not None:
                service.registry.register(extra_tool())
            session = await service.chat.new_session()
            stub.script(Reply.tools(call), Reply.text_reply("That tool did not work; here is what I know."))
            events = await _turn(service, session, "do the thing")
            finished = [e for e in events if isinstance(e, ToolCallFinished)]
            assert len(finished) == 1 and finished[0].is_error
            # The model read the error as the tool's result and answered: the turn was not lost.
            assert isinstance(events[-1], TurnFinished)
            assert events[-1].reply == "That tool did not work; here is what I know."
            tool_message = stub.requests[1].messages[-1]
            assert tool_message["role"] == "tool" and tool_message["content"] == finished[0].result
            line = check_one_line(finished[0].result, SCAN)
            offered = [*service.registry.visible(), *service.parts.runtime.memory_manager.tools()]
            tools = unknown_tool_message("", offered).split("The tools you can call: ", 1)[1]
            matches_catalogue(row_id, line, {f"The tools you can call: {tools}":
                                             "The tools you can call: <every tool offered, and its aliases>."})
            # Nothing was published by a refused or malformed memory_save.
            assert service.documents.snapshot(DocumentKey.SHORT_TERM).event_id is None
            # The conversation holds the whole turn and goes on.
            roles = [m["role"] for m in (await service.chat.session_messages(session))]
            assert roles == ["user", "assistant", "tool", "assistant"]
            stub.script(Reply.text_reply("Next answer."))
            assert (await _turn(service, session, "and now?"))[-1].reply == "Next answer."


LLM_RETRY_ROWS = [row("llm-rate-limited-auto-retry", 1.0)]


@pytest.mark.parametrize(("row_id", "retry_after"), LLM_RETRY_ROWS)
async def test_llm_auto_retry_rows(row_id: str, retry_after: float, tmp_path: Path) -> None:
    async with LlmStub() as stub:
        config = make_config(llm_base_url=stub.base_url, publish_profile=False)
        config.llm.max_retries = 1
        async with AppService(config, data_dir=tmp_path, env=make_env(DIDACTYL_NSEC=NSEC)) as service:
            stub.script(Reply.rate_limited(retry_after), Reply.text_reply("Worth the wait."))
            events = await _turn(service, (await service.chat.new_session()), "hello")
    assert isinstance(events[-1], TurnFinished) and not any(isinstance(e, TurnFailed) for e in events)
    first, second = stub.requests
    assert second.at - first.at >= retry_after * 0.95  # Retry-After was honoured (a lower bound only)
    matches_catalogue(row_id, check_one_line(events[-1].reply, SCAN))


CHAT_ROWS = [row("chat-cli-server-error", Reply.server_error())]


@pytest.mark.parametrize(("row_id", "reply"), CHAT_ROWS)
async def test_chat_cli_rows(row_id: str, reply: Reply, tmp_path: Path) -> None:
    async with LlmStub() as stub:
        config = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                  'max_retries = 0\n' + relay_config([]))
        env = cli_env(tmp_path, config, DIDACTYL_NSEC=NSEC, STUB_KEY="sk-stub-secret-123456")
        stub.script(reply)
        failed = await asyncio.to_thread(cli, ["chat", "--message", "hello"], env)
        stub.script(Reply.text_reply("Hello again."))
        retried = await asyncio.to_thread(cli, ["chat", "--message", "hello"], env)
    assert failed.code == 1 and failed.stdout == ""
    matches_catalogue(row_id, seen(failed), {stub.base_url: "<llm>"})
    assert retried.code == 0 and retried.stdout == "Hello again.\n", retried.stderr


# --- the TUI ----------------------------------------------------------------------------------------------------


async def _notified(pilot: Any, app: RecordingApp, title: str) -> str:
    await wait_for(pilot, lambda: app.notified_with(title), 10, f"a {title!r} notification")
    return check_one_line(app.notified_with(title)[0], SCAN)


TUI_CONFIG_ROWS = [
    row("tui-bad-keys-action", "keys", {"launch_rockets": "f12"}, "Config"),
    row("tui-bad-theme", "theme", "no-such-theme", "Theme"),
    row("tui-theme-markup", "theme", "nope[/x]", "Theme"),
]


@pytest.mark.parametrize(("row_id", "what", "value", "title"), TUI_CONFIG_ROWS)
async def test_tui_config_rows(row_id: str, what: str, value: Any, title: str, tmp_path: Path) -> None:
    config = make_config(publish_profile=False)
    config_path = tmp_path / "config.toml"
    if what == "keys":
        config.keys = dict(value)
        config_path.write_text("[keys]\n" + "".join(f'{k} = "{v}"\n' for k, v in value.items()))
    else:
        config.ui.theme = value
        config_path.write_text(f'[ui]\ntheme = "{value}"\n')
    config.path = config_path
    app = recording_app(tmp_path, config, make_env(DIDACTYL_NSEC=NSEC))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        line = await _notified(pilot, app, title)
        await started(pilot)  # a warning, not a stop: the app runs on
    assert str(config_path) in line, f"the message does not name the config file: {line}"
    matches_catalogue(row_id, line, {str(tmp_path): "<tmp>"})


TUI_EDITOR_ROWS = [row("editor-over-limit", 20)]


@pytest.mark.parametrize(("row_id", "limit"), TUI_EDITOR_ROWS)
async def test_editor_rows(row_id: str, limit: int, tmp_path: Path) -> None:
    app = recording_app(tmp_path, make_config(short_limit=limit, publish_profile=False), make_env(DIDACTYL_NSEC=NSEC))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
        # Mounted and focused (its keys bound): a key pressed before that is lost on a busy machine.
        await wait_for(pilot, lambda: editor.text_area.has_focus, 10, "the editor's focus")
        too_long = "the user " * 5
        editor.text_area.load_text(too_long)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "Not saved" in screen_text(app), 10, "the refusal")
        result = " ".join(str(editor.query_one("#editor-result").render()).split())
        assert editor.text_area.text == too_long  # the text stays
        assert app.service.documents.snapshot(DocumentKey.SHORT_TERM).event_id is None  # nothing was published
        line = check_one_line(result, SCAN)
        await _notified(pilot, app, "Memory over limit")
    matches_catalogue(row_id, line)


TUI_EARLY_ROWS = [row("tui-edit-before-ready", "f6")]


@pytest.mark.parametrize(("row_id", "key"), TUI_EARLY_ROWS)
async def test_tui_early_rows(row_id: str, key: str, tmp_path: Path) -> None:
    async with SilentServer() as silent:  # a relay that never answers keeps the service starting for a while
        config = make_config(urls=[silent.url], publish_profile=False)
        config.relays.timeout_s = 3.0
        app = recording_app(tmp_path, config, make_env(DIDACTYL_NSEC=NSEC))
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_for(pilot, lambda: app.service is not None, 10, "the service starting")
            assert not app.service_ready
            await pilot.press(key)
            line = await _notified(pilot, app, "Not ready")
            assert app.is_running and not isinstance(app.screen, MemoryEditorScreen)
            await started(pilot)
            await pilot.press(key)  # once started, the same key works
            await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen), 10, "the editor")
    matches_catalogue(row_id, line)


TUI_SEND_EARLY_ROWS = [row("tui-send-before-ready", "hello early")]


@pytest.mark.parametrize(("row_id", "text"), TUI_SEND_EARLY_ROWS)
async def test_tui_send_early_rows(row_id: str, text: str, tmp_path: Path) -> None:
    async with SilentServer() as silent:  # a relay that never answers keeps the service starting for a while
        config = make_config(urls=[silent.url], publish_profile=False)
        config.relays.timeout_s = 3.0
        app = recording_app(tmp_path, config, make_env(DIDACTYL_NSEC=NSEC))
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_for(pilot, lambda: app.service is not None, 10, "the service starting")
            assert not app.service_ready
            app.main_screen.chat_input.focus()
            await pilot.press(*text, "enter")
            line = await _notified(pilot, app, "Queued")
            assert app.main_screen.chat.queued == [text]  # kept, not dropped
            await started(pilot)
            await wait_for(pilot, lambda: not app.main_screen.chat.queued, 10, "the queued message to go")
            assert app.main_screen.conversation.query("MessageEntry").first().text == text
    matches_catalogue(row_id, line)


TUI_EDITOR_CLOSE_ROWS = [row("editor-close-unsaved", "a thought not saved")]


@pytest.mark.parametrize(("row_id", "text"), TUI_EDITOR_CLOSE_ROWS)
async def test_editor_close_rows(row_id: str, text: str, tmp_path: Path) -> None:
    from didactyl_tui.tui.screens.confirm import UnsavedChangesScreen

    app = recording_app(tmp_path, make_config(publish_profile=False), make_env(DIDACTYL_NSEC=NSEC))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
        editor.text_area.load_text(text)
        await pilot.press("escape")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, UnsavedChangesScreen) and app.screen)
        line = check_one_line(str(dialog.query_one("#unsaved-question").render()), SCAN)
        await pilot.press("escape")  # keep editing: nothing lost
        await wait_for(pilot, lambda: app.screen is editor)
        assert editor.text_area.text == text
    matches_catalogue(row_id, line)


# --- the table and the tests agree ----------------------------------------------------------------------------------


def _row_ids_in_this_module() -> list[str]:
    ids: list[str] = []
    for name, fn in inspect.getmembers(sys.modules[__name__], inspect.isfunction):
        if not name.startswith("test_"):
            continue
        for mark in getattr(fn, "pytestmark", []):
            if mark.name == "parametrize" and mark.args[0][0] == "row_id":
                ids += [param.id for param in mark.args[1]]
    return ids


def test_catalogue_table_and_tests_match() -> None:
    ids = _row_ids_in_this_module()
    assert len(ids) == len(set(ids)), "a row id is used twice"
    table = read_catalogue()
    assert len(ids) >= 40
    assert sorted(table) == sorted(ids), (
        f"in the table but not tested: {sorted(set(table) - set(ids))}; "
        f"tested but not in the table: {sorted(set(ids) - set(table))}")
    for row_id, entry in table.items():
        assert entry.sees and entry.bad_input and entry.area, f"row {row_id} is incomplete"
        assert row_id.split("-")[0] in {"cli", "key", "config", "relay", "llm", "chat", "tui", "editor"}

