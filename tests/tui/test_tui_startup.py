"""The first frame comes before the service and litellm: launch ``python -m didactyl_tui`` on a pty with the
first-paint hook and look at what was imported by then. (Timings live in bench/startup_bench.py.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "startup_bench.py"

# Our modules the first frame may need. Everything else (secondary screens, the sidebar panes, message
# entries, the service, the agent, the relay code) loads after it; a new import on this path is a choice
# to make here, deliberately: each module costs its import (and here, with no bytecode cache, its compile).
FIRST_FRAME_MODULES = {
    "didactyl_tui",
    "didactyl_tui.cli",
    "didactyl_tui.cli.command",  # the exit codes and the output every command writes through (light)
    "didactyl_tui.cli.parser",
    "didactyl_tui.config",
    "didactyl_tui.config_file",
    "didactyl_tui.config_remote",  # the [signer], [dm] and [attach] tables of the config
    "didactyl_tui.config_mcp",  # the [mcp] and [permissions] tables of the config
    "didactyl_tui.config_setting",
    "didactyl_tui.errors",
    "didactyl_tui.terminal_text",  # stdlib only (re): every toast and every CLI line is cleaned by it
    "didactyl_tui.service",  # only its light modules: the typed events, state.toml, labels
    "didactyl_tui.service.events",
    "didactyl_tui.service.labels",
    "didactyl_tui.service.state",
    "didactyl_tui.tui",
    "didactyl_tui.tui.app",
    "didactyl_tui.actions",
    "didactyl_tui.tui.actions",
    "didactyl_tui.tui.screens",
    "didactyl_tui.tui.screens.main",
    "didactyl_tui.tui.screens.main_view",  # what the main screen's parts see of it (its widgets, the service)
    "didactyl_tui.tui.screens.part_work",  # the parts' workers, run on the screen
    "didactyl_tui.tui.screens.main_chat",  # the parts the main screen builds in its constructor
    "didactyl_tui.tui.screens.chat_actions",
    "didactyl_tui.tui.screens.main_documents",
    "didactyl_tui.tui.screens.main_sidebar",
    "didactyl_tui.tui.screens.main_model",
    "didactyl_tui.tui.streaming",  # the reply view's interface: the main screen's class takes its hooks
    "didactyl_tui.tui.streaming.reply",  # what a reply path is (the path enum, the body and host interfaces)
    "didactyl_tui.tui.streaming.textual_range",  # which path: the installed Textual's version (no metadata import)
    "didactyl_tui.tui.streaming.screen_hooks",
    "didactyl_tui.tui.streaming.one_layout",  # the main screen's update policy (a key's echo first), first update
    "didactyl_tui.tui.streaming.full_map",  # that policy paints an echo against the compositor map as it stands
    "didactyl_tui.tui.streaming.typing_clock",  # and asks whether someone types (the time of the last key)
    "didactyl_tui.tui.theme_files",
    "didactyl_tui.tui.widgets",
    "didactyl_tui.tui.widgets.app_footer",  # the footer the first frame shows (Textual's, without its leak)
    "didactyl_tui.tui.widgets.chat_input",
    "didactyl_tui.tui.widgets.conversation",
    "didactyl_tui.tui.widgets.status_bar",
}


def _bench():
    spec = importlib.util.spec_from_file_location("startup_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def first_paint(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """One launch of the real app, stopped at its first painted frame: (the hook's record, its home)."""
    home = tmp_path_factory.mktemp("first-paint")
    bench = _bench()
    paint_file = home / "painted.json"
    env = bench.environment(home, paint_file)
    return bench.run_once([sys.executable, "-m", "didactyl_tui"], env, paint_file), home


def test_first_frame_paints_before_the_service_and_litellm_are_imported(first_paint: tuple[dict, Path]) -> None:
    record, home = first_paint
    assert record["litellm"] is False
    assert record["service"] is False
    # Nothing was started: no key was created, no relay database opened.
    data = home / "data"
    assert not data.exists() or not any(data.iterdir())


def test_first_frame_imports_only_what_it_shows(first_paint: tuple[dict, Path]) -> None:
    record, _ = first_paint
    loaded = set(record["modules"])
    assert "didactyl_tui.tui.screens.main" in loaded  # the hook really reports from inside the app
    assert loaded - FIRST_FRAME_MODULES == set(), "imported before the first frame: import it where it is used"


# What a resumed chat's first frame must not wait for: the relay and attach code (only ``[attach] agent`` needs it)
# and the service's type hub (its documents, soul and tools). ``didactyl --continue`` shows the stored chat before
# the service starts, so these load after that frame, as for a new chat (#34).
NOT_IN_A_RESUMED_FIRST_FRAME = {
    "didactyl_tui.service.attach",
    "didactyl_tui.service.agent_address",
    "didactyl_tui.nostr.pool",
    "didactyl_tui.nostr.relay",
    "didactyl_tui.nostr.remote_signer",
    "didactyl_tui.service.types",
}
# Reading the chat's end is SQLite and the conversation store alone: no module of these packages (the Nostr protocol,
# the documents, the soul's prompt records, the turn, the key) comes before that frame (~25 ms of imports, measured).
NOT_IN_A_RESUMED_FIRST_FRAME_PACKAGES = ("didactyl_tui.nostr", "didactyl_tui.agent.documents",
                                         "didactyl_tui.agent.soul", "didactyl_tui.agent.turn",
                                         "didactyl_tui.agent.identity")


def test_a_resumed_chat_first_frame_imports_no_relay_code(tmp_path: Path) -> None:
    from didactyl_tui.service.sessions import open_sessions

    bench = _bench()
    paint_file = tmp_path / "painted.json"
    env = bench.environment(tmp_path, paint_file)
    sessions = open_sessions(Path(env["DIDACTYL_DATA_DIR"]))
    chat = sessions.store.new_session("tea")
    sessions.store.append(chat, [{"role": "user", "content": "green or black?"},
                                 {"role": "assistant", "content": "**Green**, then black."}] * 200)
    sessions.store.close()
    record = bench.run_once([sys.executable, "-m", "didactyl_tui", "--continue"], env, paint_file)
    loaded = set(record["modules"])
    assert "didactyl_tui.tui.widgets.message_entry" in loaded  # the chat was in that frame
    assert loaded & NOT_IN_A_RESUMED_FIRST_FRAME == set(), "imported before a resumed chat's first frame"
    early = {m for m in loaded if m.startswith(NOT_IN_A_RESUMED_FIRST_FRAME_PACKAGES)}
    assert early == set(), "imported before a resumed chat's first frame"
