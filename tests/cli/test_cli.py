"""The real console entry (``python -m didactyl_tui``) in subprocesses, plus a few in-process checks of cli.run.

Each subprocess gets its own data and config dirs in tmp_path, no $DIDACTYL_RELAYS, and a config file that
puts the embedded relay on a free port. Kept few: each pays Python's start-up.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
import sys
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, OTHER_KEY, note_event
from cli_support import cli_env, didactyl, one_line
from llm_stub import LlmStub, Reply, ToolCall
from relay_servers import fast_client_kwargs, free_port

from didactyl_tui.cli import run
from didactyl_tui.cli.parser import build_parser
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool


def test_keygen_whoami_never_show_the_secret(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    missing = didactyl(env, "whoami")
    assert missing.returncode == 1 and "keygen" in one_line(missing.stderr)
    made = didactyl(env, "keygen")
    assert made.returncode == 0, made.stderr
    npub, pubkey = made.stdout.split()
    key_file = tmp_path / "data" / "agent.key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    secret = key_file.read_text().strip()
    who = didactyl(env, "whoami", "--json")
    assert json.loads(who.stdout) == {"npub": npub, "pubkey": pubkey, "source": "file", "key_file": str(key_file)}
    again = didactyl(env, "keygen")
    assert again.returncode == 2 and "--force" in one_line(again.stderr)
    for proc in (made, who, again):
        assert secret not in proc.stdout + proc.stderr
    key_file.chmod(0o640)
    loose = didactyl(env, "whoami")
    assert loose.returncode == 2 and f"chmod 600 {key_file}" in one_line(loose.stderr)


def test_memory_save_and_show_round_trip_with_bad_input(tmp_path: Path) -> None:
    env = cli_env(tmp_path, DIDACTYL_NSEC=AGENT_KEY.nsec())
    saved = didactyl(env, "memory", "save", "--type", "short_term", "--file", "-", "--json", stdin="Ada likes tea.\n")
    assert saved.returncode == 0, saved.stderr
    result = json.loads(saved.stdout)
    assert set(result) == {"type", "event_id", "created_at", "accepted_by", "relays", "deferred", "refused"}
    [url] = result["accepted_by"]
    assert result["relays"][url] == {"verdict": "accepted", "message": ""}

    over = didactyl(env, "memory", "save", "--type", "short_term", "--content", "x" * 8001)
    assert over.returncode == 2 and "limit is 8,000" in one_line(over.stderr)
    bad = didactyl(env, "memory", "save", "--type", "mid_term", "--content", "x")
    assert bad.returncode == 2 and "invalid choice" in one_line(bad.stderr)
    both = didactyl(env, "memory", "save", "--type", "long_term", "--content", "x", "--file", "y")
    assert both.returncode == 2 and "not allowed with" in one_line(both.stderr)
    nofile = didactyl(env, "memory", "save", "--type", "long_term", "--file", str(tmp_path / "missing.md"))
    assert nofile.returncode == 2 and "cannot read" in one_line(nofile.stderr)

    shown = didactyl(env, "memory", "show", "--type", "short_term", "--json")
    assert shown.returncode == 0, shown.stderr
    snap = json.loads(shown.stdout)
    assert snap["content"] == "Ada likes tea.\n" and snap["event_id"] == result["event_id"]  # over-limit: not saved
    assert snap["chars"] == 15 and snap["limit_chars"] == 8000 and snap["loaded"]
    plain = didactyl(env, "memory", "show", "--type", "short_term")
    assert plain.stdout == "Ada likes tea.\n"
    assert AGENT_KEY.nsec() not in saved.stdout + saved.stderr + shown.stdout + plain.stdout


def test_memory_diff_of_versions_without_final_newlines_shows_one_line_per_change(tmp_path: Path) -> None:
    env = cli_env(tmp_path, DIDACTYL_NSEC=AGENT_KEY.nsec())
    ids = []
    for text in ("short", "long"):  # --content has no final newline
        saved = didactyl(env, "memory", "save", "--type", "short_term", "--content", text, "--json")
        assert saved.returncode == 0, saved.stderr
        ids.append(json.loads(saved.stdout)["event_id"])
    diff = didactyl(env, "memory", "diff", "--type", "short_term", ids[0][:8])
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.splitlines()[2:] == [
        "@@ -1 +1 @@", "-short", "\\ No newline at end of file", "+long", "\\ No newline at end of file"]


def test_prompt_dry_run_json_without_litellm_or_textual(tmp_path: Path) -> None:
    env = cli_env(tmp_path, DIDACTYL_NSEC=AGENT_KEY.nsec(), DIDACTYL_MODEL="openai/some-model")
    proc = didactyl(env, "prompt", "--message", "hello", "--json", importtime=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "litellm" not in imported and "textual" not in imported
    data = json.loads(proc.stdout)
    assert data["model"] == "openai/some-model"
    assert [s["section"] for s in data["sections"]][:2] == ["soul", "admin_identity"]
    assert {"section", "role", "tool", "skipped", "tokens", "content"} <= set(data["sections"][0])
    assert data["messages"][-1] == {"role": "user", "content": "hello"}
    assert "memory_save" in data["tools"] and "memory_short_term_read" not in data["tools"]
    assert data["total_tokens"] > 0


def test_prompt_as_a_guest_shows_what_their_turn_would_carry_and_what_is_withheld(tmp_path: Path) -> None:
    guest, stranger = SecretKey.from_hex("6e" * 32), SecretKey.from_hex("6f" * 32)
    env = cli_env(tmp_path, f'[relays]\nembedded_port = 0\ntimeout_s = 2.0\n[admin]\npubkey = "{ADMIN_KEY.npub}"\n'
                  f'[dm]\nallow = ["{guest.npub}"]\n', DIDACTYL_NSEC=AGENT_KEY.nsec(), DIDACTYL_MODEL="openai/m")
    proc = didactyl(env, "prompt", "--message", "hi", "--json", "--as", guest.npub)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["policy"]["audience"] == "guest" and "who is not the admin" in data["policy"]["who"]
    withheld = {w["section"] for w in data["policy"]["withheld"]}
    assert {"admin_identity", "short_term_memory", "tasks"} <= withheld
    assert "memory_save" not in data["tools"] and "my_npub" in data["tools"]
    assert {s["section"]: s["audience"] for s in data["sections"]}["agent_identity"] == "everyone"
    admin = json.loads(didactyl(env, "prompt", "--json", "--as", ADMIN_KEY.npub).stdout)
    assert admin["policy"] == {"audience": "admin", "who": "the admin's own conversation", "withheld": []}
    refused = didactyl(env, "prompt", "--as", stranger.npub)
    assert refused.returncode == 1
    assert "may not write to the agent (neither [admin] pubkey nor on [dm] allow)" in one_line(refused.stderr)


def test_prompt_attached_says_where_the_prompt_is_assembled(tmp_path: Path) -> None:
    # Attached to an agent elsewhere no prompt is assembled here: one line says where it is, and no model is asked.
    env = cli_env(tmp_path, f'[relays]\nembedded_port = 0\ntimeout_s = 2.0\n[attach]\nagent = "{AGENT_KEY.npub}"\n',
                  DIDACTYL_ADMIN_NSEC=ADMIN_KEY.nsec())
    proc = didactyl(env, "prompt", "--message", "hello")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "the prompt is assembled where the agent runs" in proc.stderr and proc.stdout == ""


def test_no_relay_accepting_exits_1(tmp_path: Path) -> None:
    dead = f"ws://127.0.0.1:{free_port()}"
    env = cli_env(tmp_path, f'[relays]\nembedded = false\nurls = ["{dead}"]\ntimeout_s = 0.5\n',
                  DIDACTYL_NSEC=AGENT_KEY.nsec())
    proc = didactyl(env, "memory", "save", "--type", "long_term", "--content", "kept?", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["relays"][dead]["verdict"] == "not_connected"
    assert "no relay accepted" in proc.stderr


async def test_chat_json_through_the_stub(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.tools(ToolCall("my_npub", "{}")), Reply.text_reply("Your npub is above."))
        config = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                  '[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n')
        env = cli_env(tmp_path, config, DIDACTYL_NSEC=AGENT_KEY.nsec(), STUB_KEY="sk-stub")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "didactyl_tui", "chat", "--message", "who am I?", "--json",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    data = json.loads(out)
    assert set(data) == {"session_id", "ephemeral", "reply", "tool_calls", "prompt", "cut"}
    assert data["cut"] is None  # no bound was reached
    assert data["reply"] == "Your npub is above."
    npub_result = json.dumps({"content": AGENT_KEY.npub})
    assert data["tool_calls"] == [{"name": "my_npub", "arguments": {}, "result": npub_result, "ending": "done"}]
    assert data["prompt"]["messages"][-1] == {"role": "user", "content": "who am I?"}


def test_a_failed_headless_turn_leaves_no_chat_behind_and_no_model_names_ctrl_l(tmp_path: Path) -> None:
    config = '[llm]\nmodel = "nosuchprovider/bad-name"\n[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n'
    env = cli_env(tmp_path, config, DIDACTYL_NSEC=AGENT_KEY.nsec())
    failed = didactyl(env, "chat", "-m", "hi")
    assert failed.returncode == 1 and "nosuchprovider/bad-name" in one_line(failed.stderr)
    no_model = tmp_path / "no-model.toml"  # the relay on any free port: 7447 may be another program's here
    no_model.write_text('[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n')
    none = didactyl({**env, "DIDACTYL_MODEL": "", "DIDACTYL_CONFIG": str(no_model)}, "chat", "-m", "hi")
    assert none.returncode == 1 and one_line(none.stderr) == (
        "didactyl: No model configured: choose a model in the app with Ctrl+L, or set [llm] model in config.toml or "
        "$DIDACTYL_MODEL (e.g. openai/gpt-4o-mini)")
    listed = didactyl(env, "sessions", "list", "--all")
    assert (listed.returncode, listed.stdout) == (0, "")


async def test_relay_command_serves_the_data_dirs_shared_relay(tmp_path: Path) -> None:
    env = cli_env(tmp_path, DIDACTYL_NSEC=AGENT_KEY.nsec())
    no_key = didactyl(cli_env(tmp_path / "other"), "relay", "--port", "0")
    assert no_key.returncode == 1 and "allow-list" in one_line(no_key.stderr)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "didactyl_tui", "relay", "--port", "0",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        url = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
        assert url.startswith("ws://127.0.0.1:")
        pool = RelayPool([url], **fast_client_kwargs())
        await pool.start()
        try:
            assert (await pool.publish(note_event(AGENT_KEY, "hi", 1_750_000_000), timeout=2)).any_accepted
            # [relays.embedded] reached the relay process: only the agent's (and admin's) keys may write.
            stranger = await pool.publish(note_event(OTHER_KEY, "hi", 1_750_000_000), timeout=2)
            assert not stranger.any_accepted and "blocked" in stranger.summary()
        finally:
            await pool.close()
        # Every didactyl on this data dir uses it: a save goes through it, and no second relay starts.
        saved = await asyncio.to_thread(didactyl, env, "memory", "save",
                                        "--type", "short_term", "--content", "via the shared relay", "--json")
        assert saved.returncode == 0, saved.stderr
        assert list(json.loads(saved.stdout)["accepted_by"]) == [url]
        assert "warning" not in saved.stderr
        second = await asyncio.to_thread(didactyl, env, "relay", "--port", "0")
        assert second.returncode == 3 and "already serves" in second.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0
    assert (tmp_path / "data" / "relay.sqlite3").exists()


def test_errors_are_one_line_with_a_hint_for_the_unexpected(tmp_path: Path) -> None:
    env = cli_env(tmp_path)

    def broken_tui(config, data, env, session_id) -> None:
        raise RuntimeError("boom\nsecond line")

    err = io.StringIO()
    assert run([], env=env, launch_tui=broken_tui, stdout=io.StringIO(), stderr=err) == 1
    assert one_line(err.getvalue()) == ("didactyl: unexpected error: RuntimeError: boom second line "
                                        "(rerun with DIDACTYL_DEBUG=1 for details)")
    bad_config = cli_env(tmp_path, "[relays]\nembedded_port = 99999\n")
    err = io.StringIO()
    assert run(["prompt"], env=bad_config, stdout=io.StringIO(), stderr=err) == 2
    line = one_line(err.getvalue())
    assert "config.toml, line 2" in line and "[relays.embedded_port]" in line
    err = io.StringIO()
    assert run(["chat"], env=env, stdout=io.StringIO(), stderr=err) == 2
    assert "--message" in one_line(err.getvalue())


@pytest.mark.parametrize("argv", [["--help"], ["memory", "--help"]])
def test_help_exits_zero(argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        run(argv, env=cli_env(tmp_path))
    assert info.value.code == 0 and "didactyl" in capsys.readouterr().out


def test_version_is_the_installed_packages(tmp_path: Path) -> None:
    from importlib.metadata import version

    done = didactyl(cli_env(tmp_path), "--version")
    assert done.returncode == 0 and done.stdout == f"didactyl {version('didactyl-tui')}\n" and not done.stderr
    assert not (tmp_path / "data").exists()  # printing the version touches nothing
    # "memory show --version EVENT_ID" is that command's own option, not this one.
    args = build_parser().parse_args(["memory", "show", "--type", "short_term", "--version", "ab12"])
    assert args.version == "ab12" and not args.print_version


async def test_a_stalled_headless_reply_says_so_on_stderr_and_the_reply_stays_whole(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("one two", chunks=["one", " two"], pauses={0: 4.0}))
        config = (f'[llm]\nmodel = "openai/stub-model"\napi_base = "{stub.base_url}"\napi_key_env = "STUB_KEY"\n'
                  'stall_notice_s = 1\n[relays]\nembedded_port = 0\n[memory]\nbackend = "none"\n')
        env = cli_env(tmp_path, config, DIDACTYL_NSEC=AGENT_KEY.nsec(), STUB_KEY="sk-stub")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "didactyl_tui", "chat", "-m", "go", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    assert out.decode() == "one two\n"  # stdout carries the reply alone
    notices = [line for line in err.decode().splitlines() if "no word from the model" in line]
    # Once a silence (never each second of it): the 4 s pause, and the wait for the model's first word if that took
    # over a second too (the model helper starting on a loaded machine).
    assert 1 <= len(notices) <= 2, err.decode()
    assert notices[0].startswith("didactyl: no word from the model for ") and notices[0].endswith("(Ctrl+C stops)")
