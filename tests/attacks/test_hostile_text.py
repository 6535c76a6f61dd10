"""Hostile text (issue #10): what relays, the model and the config say reaches the terminal as plain text.

A relay's OK, NOTICE and CLOSED reasons carry OSC 52 (writes the clipboard), a title change, a screen clear,
cursor moves and fake "all good" text. The CLI runs as a real process against a real websocket relay that
sends them; no escape byte (nor any other control character but newline) may reach its stdout or stderr,
debug logs included. In the TUI (Pilot), the same reasons and a config value with markup in it are shown
literally and never crash the app.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bad_inputs_support import NSEC, cli_env, recording_app
from cli_support import outside_env
from llm_stub import LlmStub, Reply
from relay_servers import ScriptedConnection, ScriptedRelay
from tui_support import make_config, make_env, started, wait_for

from didactyl_tui.terminal_text import StreamCleaner, clean

ESC = "\x1b"
HOSTILE = (
    "blocked: \x1b]52;c;cm0gLXJmIH4vKgo=\x07"  # OSC 52: put `rm -rf ~/*` on the clipboard
    "\x1b]0;pwned\x1b\\"  # retitle the window
    "\x1b[2J\x1b[H\r"  # clear the screen, cursor home, carriage return
    "\x1b[32mall good: saved on every relay\x1b[0m"  # fake text, in green
    "\x9b2J\x9d0;8-bit title\x9c\x1bP+q544e\x1b\\"  # 8-bit CSI and OSC, a DCS query
    " [/] [ui] [bold]not bold[/bold]\x07\x08\x7f end"  # markup, bell, backspace, DEL
)
SHOWN = "blocked: all good: saved on every relay [/] [ui] [bold]not bold[/bold] end"


def terminal_controls(text: str) -> list[str]:
    """The control characters in ``text`` a terminal would obey (newline and tab are text)."""
    return sorted({repr(ch) for ch in text if (ord(ch) < 0x20 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F})


async def hostile_relay(conn: ScriptedConnection) -> None:
    """A NOTICE on connect; every REQ gets CLOSED, every EVENT a NOTICE and ``OK false``, all with HOSTILE."""
    await conn.send(["NOTICE", HOSTILE])
    for _ in range(200):  # bounded: a save and a show need a handful of messages
        msg = await conn.recv()
        if msg[0] == "REQ":
            await conn.send(["CLOSED", msg[1], HOSTILE])
        elif msg[0] == "EVENT":
            await conn.send(["NOTICE", HOSTILE])
            await conn.send(["OK", msg[1]["id"], False, HOSTILE])


def relays_config(url: str) -> str:
    return (f'[relays]\nembedded_port = 0\ntimeout_s = 2.0\nurls = ["{url}"]\n[memory]\nbackend = "none"\n'
            "[agent]\npublish_profile = false\n")


def didactyl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    full = outside_env() | env
    return subprocess.run([sys.executable, "-m", "didactyl_tui", *args], env=full, capture_output=True,
                          timeout=60, check=False)


def assert_no_controls(proc: subprocess.CompletedProcess[bytes]) -> tuple[str, str]:
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert not terminal_controls(out), f"stdout carries {terminal_controls(out)}: {out!r}"
    assert not terminal_controls(err), f"stderr carries {terminal_controls(err)}: {err!r}"
    return out, err


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug-logs"])
async def test_relay_reasons_never_reach_the_cli_terminal(tmp_path: Path, debug: bool) -> None:
    extra = {"DIDACTYL_DEBUG": "1"} if debug else {}
    async with ScriptedRelay(hostile_relay) as relay:
        env = cli_env(tmp_path, relays_config(relay.url), DIDACTYL_NSEC=NSEC, **extra)
        saved = await asyncio.to_thread(
            didactyl, env, "memory", "save", "--type", "short_term", "--content", "the user likes tea")
        as_json = await asyncio.to_thread(
            didactyl, env, "memory", "save", "--type", "short_term", "--content", "tea, again", "--json")
        status = await asyncio.to_thread(didactyl, env, "memory", "status")
    assert relay.connections >= 1 and any(m[0] == "EVENT" for m in relay.received), "the relay was not used"
    out, err = assert_no_controls(saved)
    assert saved.returncode == 0, err  # saved on the embedded relay; the hostile one named, its words defused
    assert f"{relay.url}: rejected: {SHOWN})" in out, out
    out, err = assert_no_controls(as_json)
    assert json.loads(out)["relays"][relay.url]["message"] == HOSTILE  # JSON keeps the data, escaped
    assert_no_controls(status)


async def test_memory_text_with_escapes_is_shown_cleaned_and_kept_whole(tmp_path: Path) -> None:
    """A memory's text is outside text too (another device, a relay): ``show`` prints it cleaned, ``--json``
    prints it exactly (escaped), and nothing is lost from the stored memory."""
    env = cli_env(tmp_path, '[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n'
                  "[agent]\npublish_profile = false\n", DIDACTYL_NSEC=NSEC)
    text = f"line one\n{HOSTILE}\n\tindented\n"
    saved = await asyncio.to_thread(didactyl, env, "memory", "save", "--type", "long_term", "--content", text)
    assert saved.returncode == 0, saved.stderr.decode()
    shown = await asyncio.to_thread(didactyl, env, "memory", "show", "--type", "long_term")
    out, _ = assert_no_controls(shown)
    assert out == f"line one\n{SHOWN}\n\tindented\n"  # newlines and tabs kept
    as_json = await asyncio.to_thread(didactyl, env, "memory", "show", "--type", "long_term", "--json")
    out, _ = assert_no_controls(as_json)
    assert json.loads(out)["content"] == text


async def test_a_hostile_model_reply_is_cleaned_in_the_cli(tmp_path: Path) -> None:
    """The reply streams in pieces; a sequence cut between two pieces is removed whole."""
    async with LlmStub() as stub:
        stub.script(Reply.text_reply(f"Hello. {HOSTILE}"))
        config = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                  '[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n[agent]\npublish_profile = false\n')
        env = cli_env(tmp_path, config, DIDACTYL_NSEC=NSEC, STUB_KEY="sk-stub")
        proc = await asyncio.to_thread(didactyl, env, "chat", "--message", "hi")
    out, err = assert_no_controls(proc)
    assert proc.returncode == 0, err
    assert out == f"Hello. {SHOWN}\n"


def test_a_stream_cut_anywhere_shows_what_the_whole_text_shows() -> None:
    whole = clean(f"Hello. {HOSTILE} bye\r\n")
    for cut in range(1, len(HOSTILE) + 10):
        text = f"Hello. {HOSTILE} bye\r\n"
        cleaner = StreamCleaner()
        pieces = cleaner.feed(text[:cut]) + cleaner.feed(text[cut:]) + cleaner.flush()
        assert pieces == whole, cut


# --- the TUI -------------------------------------------------------------------------------------------------


async def ok_false_relay(conn: ScriptedConnection) -> None:
    """Answers every EVENT (the agent's profile) with ``OK false`` and a reason full of markup and escapes."""
    for _ in range(200):
        msg = await conn.recv()
        if msg[0] == "REQ":
            await conn.send(["EOSE", msg[1]])
        elif msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], False, HOSTILE])


async def test_a_relay_reason_with_markup_is_shown_literally_in_a_toast(tmp_path: Path) -> None:
    """The profile published at start is refused with HOSTILE: the warning toast quotes it as text
    (before, ``[/]`` raised MarkupError and the app exited)."""
    async with ScriptedRelay(ok_false_relay) as relay:
        config = make_config(urls=[relay.url], publish_profile=True)
        config.relays.embedded = False  # the hostile relay is the only one: its refusal is warned about
        app = recording_app(tmp_path, config, make_env(DIDACTYL_NSEC=NSEC))
        async with app.run_test(size=(130, 40), notifications=True) as pilot:
            await started(pilot)
            toasts = await wait_for(pilot, lambda: [t for t in app.notified_with("Warning") if "not published" in t],
                                    15, lambda: f"the refusal in a toast (seen: {app.shown_toasts()})")
            assert app.is_running
    shown = toasts[0]
    assert f"{relay.url}: rejected: {SHOWN}" in shown, shown
    assert not terminal_controls(shown)


async def test_a_model_reply_with_escapes_and_markup_is_shown_as_text(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply(f"Plain words {HOSTILE}"))
        config = make_config(llm_base_url=stub.base_url, publish_profile=False)
        app = recording_app(tmp_path, config, make_env(DIDACTYL_NSEC=NSEC))
        async with app.run_test(size=(130, 40), notifications=True) as pilot:
            await started(pilot)
            screen: Any = app.main_screen
            screen.chat_input.load_text("hello")
            await pilot.press("enter")
            reply = await wait_for(pilot, lambda: (r := screen.conversation.last_reply()) and r.endswith("end") and r,
                                   30, "the reply")
            assert app.is_running
    assert ESC not in reply and not terminal_controls(reply)
    assert reply.startswith("Plain words blocked: all good") and "[/] [ui]" in reply
