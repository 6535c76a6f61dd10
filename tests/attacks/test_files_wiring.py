"""The agent-level file bounds, wired (issue #10): what the app does at start, through the real CLI.

* a data dir that others can reach is said at start, one ``warning:`` line per place, as ssh does;
* the embedded relay's database (every event the agent keeps) is 0600 whatever the dir's mode and umask;
* a memory save to a relay works although the conversations database cannot be opened;
* litellm is not imported ahead of time when no model is configured.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bad_inputs_support import NSEC, cli, cli_env

from didactyl_tui.config import Config
from didactyl_tui.service.app import AppService

QUIET = '[relays]\nembedded_port = 0\ntimeout_s = 2.0\n[memory]\nbackend = "none"\n[agent]\npublish_profile = false\n'


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_loose_data_dir_is_warned_about_and_every_file_made_is_private(tmp_path: Path) -> None:
    env = cli_env(tmp_path, QUIET, DIDACTYL_NSEC=NSEC)
    data = Path(env["DIDACTYL_DATA_DIR"])
    data.mkdir()
    os.chmod(data, 0o755)
    old = os.umask(0o022)
    try:
        result = cli(["memory", "save", "--type", "short_term", "--content", "private, please"], env)
    finally:
        os.umask(old)
    assert result.code == 0, result.stderr
    assert (f"warning: the data dir {data} is accessible by other users (mode 0755); it holds your agent's key "
            f"and plaintext chats: chmod 700 {data}") in result.stderr.splitlines()
    assert (data / "relay.sqlite3").exists()
    wrong = {p.name: f"{mode(p):04o}" for p in data.iterdir() if p.is_file() and mode(p) != 0o600}
    assert not wrong, f"files others can read: {wrong}"


def test_a_private_data_dir_gives_no_warning(tmp_path: Path) -> None:
    env = cli_env(tmp_path, QUIET, DIDACTYL_NSEC=NSEC)
    result = cli(["memory", "save", "--type", "short_term", "--content", "fine"], env)
    assert result.code == 0 and "warning" not in result.stderr, result.stderr


def test_a_memory_save_works_when_the_conversations_db_cannot_be_opened(tmp_path: Path) -> None:
    env = cli_env(tmp_path, QUIET, DIDACTYL_NSEC=NSEC)
    data = Path(env["DIDACTYL_DATA_DIR"])
    data.mkdir(mode=0o700)
    (data / "conversations.sqlite3").mkdir()  # a folder where the database should be: it cannot open
    result = cli(["memory", "save", "--type", "long_term", "--content", "saved anyway"], env)
    assert result.code == 0, result.stderr
    assert "accepted by 1/1 relays" in result.stdout
    shown = cli(["memory", "show", "--type", "long_term"], env)
    assert shown.stdout == "saved anyway\n"


async def test_litellm_is_preloaded_only_when_a_model_is_configured(tmp_path: Path) -> None:
    config = Config()
    config.relays.embedded_port = 0
    config.memory.backend = "none"
    config.agent.publish_profile = False
    config.llm.model = ""
    env = {"DIDACTYL_NSEC": NSEC}
    async with AppService(config, data_dir=tmp_path / "data", env=env) as service:
        assert service.preload_llm() is None  # no model: nothing to win time for
    config.llm.model = "openai/some-model"
    async with AppService(config, data_dir=tmp_path / "data2", env=env) as service:
        # With the model helper (the default) nothing loads until a model is needed (#34): the helper starts then.
        assert service.preload_llm() is None
    config.llm.worker_process = False
    async with AppService(config, data_dir=tmp_path / "data3", env=env) as service:
        loading = service.preload_llm()  # litellm in this process: its import starts at once, in a thread
        assert loading is not None
        loading.join(60)
