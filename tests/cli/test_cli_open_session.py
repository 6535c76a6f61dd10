"""``didactyl --continue`` and ``didactyl --session ID``: the app opens on a stored conversation; a bad choice
is one line on stderr (exit 2) and the app does not start."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from cli_support import cli_env, one_line
from tui_support import make_app, make_config, screen_text, started, wait_for

from didactyl_tui.agent.conversations.store import ConversationStore
from didactyl_tui.cli import run
from didactyl_tui.cli.open_session import session_to_open
from didactyl_tui.service.sessions import CONVERSATIONS_DB


def store_chats(data: Path) -> tuple[str, str]:
    """Two stored chats, the second one active last; plus an empty session newer than both."""
    data.mkdir(parents=True, exist_ok=True)
    clock = iter(range(1_750_000_000, 1_750_001_000))
    store = ConversationStore(data / CONVERSATIONS_DB, clock=lambda: float(next(clock)))
    try:
        older = store.new_session("about tea")
        newer = store.new_session("about relays")
        store.append(newer, [{"role": "user", "content": "which relay?"},
                             {"role": "assistant", "content": "The embedded one."}])
        store.append(older, [{"role": "user", "content": "green or black?"}])
        store.append(newer, [{"role": "user", "content": "and after that?"},
                             {"role": "assistant", "content": "Yours, then."}])
        store.new_session()  # opened, never written to: not a conversation to continue
    finally:
        store.close()
    return older, newer


def open_with(argv: list[str], env: dict[str, str]) -> tuple[int, list[Any], str]:
    launched: list[Any] = []

    def launch(config: Any, data: Path, env: Any, opened: Any) -> None:
        launched.append(opened.session_id if opened is not None else None)

    err = io.StringIO()
    code = run(argv, env=env, launch_tui=launch, stdout=io.StringIO(), stderr=err)
    return code, launched, err.getvalue()


def test_continue_opens_the_most_recent_conversation_and_session_a_given_one(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    older, newer = store_chats(Path(env["DIDACTYL_DATA_DIR"]))
    assert open_with(["--continue"], env) == (0, [newer], "")
    assert open_with(["--session", older], env) == (0, [older], "")
    assert open_with([], env) == (0, [None], "")  # no flag: a new chat, as before


def test_a_bad_choice_is_one_line_and_the_app_does_not_start(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    code, launched, err = open_with(["--continue"], env)  # nothing saved yet (no database either)
    assert (code, launched) == (2, []) and one_line(err) == "didactyl: Usage: no saved conversation to continue"
    code, launched, err = open_with(["--session", "abc"], env)
    assert (code, launched) == (2, []) and "no conversation 'abc'" in one_line(err)
    store_chats(Path(env["DIDACTYL_DATA_DIR"]))
    code, launched, err = open_with(["--session", "\x1b[31mnope\nsecond"], env)
    line = one_line(err)
    assert (code, launched) == (2, []) and "no conversation" in line and "\x1b" not in line.replace("\\x1b", "")
    for argv in (["--continue", "--session", "x"], ["--continue", "whoami"], ["--session", "x", "prompt"]):
        code, launched, err = open_with(argv, env)
        assert (code, launched) == (2, []), argv
        one_line(err)


async def test_the_app_opens_on_the_chosen_conversation(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _, newer = store_chats(data)
    app = make_app(data, make_config())
    app.open_session_id = newer
    async with app.run_test(size=(110, 32)) as pilot:
        await started(pilot)
        main = app.main_screen
        await wait_for(pilot, lambda: main.chat.session_id == newer and "Yours, then." in screen_text(app), 15,
                       "the conversation to show")
        text = screen_text(app)
        assert "which relay?" in text and "green or black?" not in text


def painted_first(app: Any) -> dict[str, Any]:
    """What the app's first frame showed, noted when it is on the terminal (before the service is built)."""
    seen: dict[str, Any] = {}
    first_painted = app.first_painted

    def noting() -> None:
        seen.update(text=screen_text(app), service=app.service_ready)
        first_painted()

    app.first_painted = noting
    return seen


async def test_continue_shows_the_chat_in_the_first_frame_before_the_service_starts(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    data = Path(env["DIDACTYL_DATA_DIR"])
    _, newer = store_chats(data)
    tail, _ = await asyncio.to_thread(session_to_open, data, last=True, session_id=None, attached_to=None)
    app = make_app(data, make_config())
    app.opened, app.open_session_id = tail, tail.session_id
    first = painted_first(app)
    async with app.run_test(size=(110, 32)) as pilot:
        await started(pilot)
        assert "Yours, then." in first["text"] and "which relay?" in first["text"] and not first["service"]
        assert app.main_screen.chat.session_id == newer


async def test_a_long_chat_opens_on_its_end_and_the_rest_follows(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    store = ConversationStore(data / CONVERSATIONS_DB)
    session = store.new_session()
    store.append(session, [m for n in range(400) for m in ({"role": "user", "content": f"question {n}"},
                                                            {"role": "assistant", "content": f"answer {n}"})])
    store.close()
    tail, _ = await asyncio.to_thread(session_to_open, data, last=True, session_id=None, attached_to=None)
    assert tail.earlier == 800 - len(tail.messages) > 0 and tail.messages[-1]["content"] == "answer 399"
    app = make_app(data, make_config())
    app.opened, app.open_session_id = tail, tail.session_id
    first = painted_first(app)
    async with app.run_test(size=(110, 32)) as pilot:
        await started(pilot)
        assert "answer 399" in first["text"] and not first["service"]
        main = app.main_screen
        conversation = main.conversation
        await wait_for(pilot, lambda: not conversation.query(".history-pending"), 15, "the earlier messages")
        exported = conversation.as_markdown()
        assert exported.count("## You") == 400 and exported.index("question 0") < exported.index("answer 399")
        conversation.scroll_home(animate=False)
        await wait_for(pilot, lambda: "question 0" in screen_text(app), 15, "the first message, scrolled to")
