"""The agent's key: created 0600 on first run, $DIDACTYL_NSEC wins, loose modes refused, never echoed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from didactyl_tui.agent.identity.keystore import key_file_path, load_agent_key, write_key_file
from didactyl_tui.errors import ConfigError, NostrError
from didactyl_tui.nostr.keys import SecretKey

KEY = SecretKey.from_hex("11" * 32)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_run_creates_a_private_key_file_and_later_runs_reuse_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = load_agent_key(data, env={})
    assert first.source == "created" and first.path == key_file_path(data)
    assert mode(first.path) == 0o600
    assert first.path.read_text().startswith("nsec1")
    again = load_agent_key(data, env={})
    assert again.source == "file" and again.key == first.key


def test_env_nsec_wins_over_the_file_and_a_bad_one_is_not_echoed(tmp_path: Path) -> None:
    write_key_file(key_file_path(tmp_path), SecretKey.generate())
    loaded = load_agent_key(tmp_path, env={"DIDACTYL_NSEC": KEY.nsec()})
    assert loaded.source == "env" and loaded.key == KEY
    assert load_agent_key(tmp_path, env={"DIDACTYL_NSEC": KEY.secret_hex()}).key == KEY
    bad = "nsec1" + "q" * 58
    with pytest.raises(NostrError) as info:
        load_agent_key(tmp_path, env={"DIDACTYL_NSEC": bad})
    assert bad not in str(info.value) and "DIDACTYL_NSEC" in str(info.value)


def test_a_key_file_readable_by_others_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = write_key_file(key_file_path(tmp_path), KEY)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError) as info:
        load_agent_key(tmp_path, env={})
    message = str(info.value)
    assert f"chmod 600 {path}" in message and "0644" in message
    assert KEY.nsec() not in message and KEY.secret_hex() not in message


def test_write_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = write_key_file(key_file_path(tmp_path), KEY)
    other = SecretKey.generate()
    with pytest.raises(ConfigError, match="--force"):
        write_key_file(path, other)
    assert load_agent_key(tmp_path, env={}).key == KEY
    write_key_file(path, other, force=True)
    assert load_agent_key(tmp_path, env={}).key == other and mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["agent.key"]  # no temp files left behind


def test_a_damaged_key_file_gives_a_clear_error_without_its_content(tmp_path: Path) -> None:
    path = key_file_path(tmp_path)
    path.write_text("nsec1garbage\n")
    os.chmod(path, 0o600)
    with pytest.raises(NostrError) as info:
        load_agent_key(tmp_path, env={})
    assert "garbage" not in str(info.value) and "keygen" in str(info.value)
