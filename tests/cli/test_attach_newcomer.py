"""The agent elsewhere, as a newcomer meets it (issue #31's "Done when"), with a real ``didactyl serve`` process, the
real command line and the app under Pilot, two data dirs, loopback relays and the scripted model:

- ``serve`` with only a model configured prints one line; that line, run from a fresh data dir with nothing edited,
  pairs (both sides show the same fingerprint; the serve side's config gets ``[admin] pubkey``, the rest kept), and a
  typed message is answered and shown. Restarted, serve says nothing more of the key and prints the line without an
  invitation.
- ``attach`` with only the agent's npub: the message is marked not delivered with the reason; run again with the
  relay given, it is delivered once and answered.
- ``didactyl invite`` beside a running serve: its line pairs another laptop in place of the admin, followed at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from cli_support import Served, cli_env, didactyl, outside_env
from llm_stub import LlmStub, Reply
from tui_support import SIZE, LabelledApp, started, wait_for

from didactyl_tui.cli import run
from didactyl_tui.config import Config
from didactyl_tui.config_file import load_config
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip19 import decode_nprofile
from didactyl_tui.tui.widgets.error_entry import ErrorEntry
from didactyl_tui.tui.widgets.message_entry import MessageEntry

pytestmark = pytest.mark.usefixtures("warm_litellm")


def _fresh(tmp_path: Path) -> dict[str, str]:
    """A laptop where nothing was set up: no config file, an empty data dir."""
    env = outside_env()
    env.update(DIDACTYL_DATA_DIR=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "xdg-data"), HOME=str(tmp_path / "home"))
    return env


def _attach(argv: list[str], env: dict[str, str]) -> tuple[Config, Path, Mapping[str, str]]:
    """``didactyl ARGV`` through the real command line, up to the app it opens."""
    opened: list[tuple[Config, Path, Mapping[str, str]]] = []
    assert run(argv, env=env, launch_tui=lambda config, data, env, session: opened.append((config, data, env))) == 0
    [what] = opened
    return what


def _texts(app: Any, role: str) -> list[str]:
    return [m.text for m in app.main_screen.conversation.query(MessageEntry) if m.role == role]


async def test_the_line_serve_prints_pairs_a_fresh_data_dir_and_a_typed_message_is_answered(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("Hello, new admin."))
        model_only = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                      "[relays]\nembedded_port = 0\n")  # a free port: other tests run relays beside this one
        server_env = cli_env(tmp_path / "server", model_only, STUB_KEY="sk-stub")
        served = Served(server_env)
        await served.start()
        try:
            line = (await served.wait_for("didactyl attach nprofile1", 30)).split()
            assert line[:2] == ["didactyl", "attach"] and line[3] == "--invite"
            assert "the agent's key was made on this start" in served.log and "bundle export" in served.log
            agent = decode_nprofile(line[2]).pubkey

            config, data, env = _attach(line[1:], _fresh(tmp_path / "laptop"))
            app = LabelledApp(config, data_dir=data, env=dict(env))
            async with app.run_test(size=SIZE) as pilot:
                await started(pilot)
                main = app.main_screen
                await wait_for(pilot, lambda: any(t.startswith("Paired:") for t in _texts(app, "assistant")), 60,
                               "the agent's answer to the invitation")
                admin = SecretKey.parse((data / "admin.key").read_text().strip())
                assert stat.S_IMODE(os.stat(data / "admin.key").st_mode) == 0o600
                [request] = _texts(app, "user")
                mark = request.rsplit("fingerprint ", 1)[1].rstrip(")")
                assert mark in _texts(app, "assistant")[0]
                logged = await served.wait_for("paired: ", 30)
                assert admin.npub in logged and mark in logged  # both sides show the same fingerprint

                main.chat_input.focus()
                await pilot.press(*"hello, agent")
                await pilot.press("enter")
                await wait_for(pilot, lambda: main.conversation.last_reply() == "Hello, new admin.", 60, "the reply")
            [asked] = stub.requests
            assert "hello, agent" in str(asked.messages) and line[4] not in str(asked.messages)
            served_config = load_config(None, server_env)
            assert served_config.admin.pubkey == admin.npub and served_config.llm.api_base == stub.base_url
            assert agent != admin.public_key_hex
        finally:
            assert await served.stop() == 0, served.log
        again = Served(server_env)  # paired now: the line has no invitation, and the key is not said again
        await again.start()
        try:
            plain = (await again.wait_for("didactyl attach nprofile1", 30)).split()
            assert plain[:2] == ["didactyl", "attach"] and "--invite" not in plain
            assert "to attach as its admin" in again.log and "key was made" not in again.log
        finally:
            assert await again.stop() == 0, again.log


async def test_attach_with_the_npub_alone_is_not_delivered_and_with_the_relay_given_goes_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="didactyl")  # on a failure: where the laptop sent, and what it was told
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        stub.script(Reply.text_reply("Found you."))
        config = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                  f'[relays]\nembedded = false\nurls = ["{relay.url}"]\n[admin]\npubkey = "{ADMIN_KEY.npub}"\n'
                  '[memory]\nbackend = "none"\n')
        served = Served(cli_env(tmp_path / "server", config, DIDACTYL_NSEC=AGENT_KEY.nsec(), STUB_KEY="sk-stub"))
        await served.start()
        try:
            laptop_env = {**_fresh(tmp_path / "laptop"), "DIDACTYL_ADMIN_NSEC": ADMIN_KEY.nsec()}
            config, data, env = _attach(["attach", AGENT_KEY.npub], laptop_env)
            app = LabelledApp(config, data_dir=data, env=dict(env))
            async with app.run_test(size=SIZE) as pilot:
                await started(pilot)
                main = app.main_screen
                main.chat_input.focus()
                await pilot.press(*"anyone there?")
                await pilot.press("enter")
                [error] = await wait_for(pilot, lambda: list(main.conversation.query(ErrorEntry)), 60,
                                         "the message marked not delivered")
                assert error.title == "Not delivered" and "--relay" in error.message
            assert stub.requests == []

            config, data, env = _attach(["attach", AGENT_KEY.npub, "--relay", relay.url], laptop_env)
            app = LabelledApp(config, data_dir=data, env=dict(env))
            async with app.run_test(size=SIZE) as pilot:
                await started(pilot)
                await wait_for(pilot, lambda: app.main_screen.conversation.last_reply() == "Found you.", 60,
                               "the answer to the message delivered at start")
                assert _texts(app, "user") == ["anyone there?"]
            await served.wait_for("dm answered", 30)
            [asked] = stub.requests
            assert "anyone there?" in str(asked.messages)
        finally:
            stopped = await served.stop()
            print(f"serve's log:\n{served.log}")  # shown when the test fails: what serve received and answered
            assert stopped == 0, served.log


async def test_didactyl_invite_pairs_another_laptop_in_place_of_the_admin_while_serve_runs(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        config = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                  f'[relays]\nembedded_port = 0\n[admin]\npubkey = "{ADMIN_KEY.npub}"\n[memory]\nbackend = "none"\n')
        server_env = cli_env(tmp_path / "server", config, DIDACTYL_NSEC=AGENT_KEY.nsec(), STUB_KEY="sk-stub")
        served = Served(server_env)
        await served.start()
        try:
            await served.wait_for("to attach as its admin", 30)
            invited = await asyncio.to_thread(didactyl, server_env, "invite")
            assert invited.returncode == 0, invited.stderr
            line = invited.stdout.split()
            assert line[:2] == ["didactyl", "attach"] and line[3] == "--invite"
            assert f"replacing {ADMIN_KEY.npub[:20]}…" in invited.stderr
            config, data, env = _attach(line[1:], _fresh(tmp_path / "laptop"))
            app = LabelledApp(config, data_dir=data, env=dict(env))
            async with app.run_test(size=SIZE) as pilot:
                await started(pilot)
                await wait_for(pilot, lambda: any(t.startswith("Paired:") for t in _texts(app, "assistant")), 60,
                               "the agent's answer to the invitation")
            laptop = SecretKey.parse((data / "admin.key").read_text().strip())
            assert load_config(None, server_env).admin.pubkey == laptop.npub
            await served.wait_for(f"the admin is now {laptop.npub[:20]}", 30)  # followed at once, and said
        finally:
            assert await served.stop() == 0, served.log
