"""``write_whole``: the one way the app replaces a small file it keeps — whole or not at all, and private."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from didactyl_tui.whole_file import write_whole


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_is_private_and_its_folder_is_made(tmp_path: Path) -> None:
    path = tmp_path / "new" / "state.toml"
    write_whole(path, "theme = 'x'\n")
    assert path.read_text() == "theme = 'x'\n" and mode_of(path) == 0o600
    assert mode_of(path.parent) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["state.toml"]  # no temporary file left


def test_a_file_is_replaced_whole_with_the_mode_asked(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("old\n")
    path.chmod(0o640)
    write_whole(path, b"new\n", mode=0o640)  # a person's config keeps the mode they gave it
    assert path.read_bytes() == b"new\n" and mode_of(path) == 0o640


def test_a_failure_leaves_the_old_file_and_nothing_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text("kept\n")
    with pytest.raises(TypeError):
        write_whole(path, 123)  # type: ignore[arg-type]  # fails while writing
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "inside").write_text("x")
    with pytest.raises(OSError):
        write_whole(taken, "text")  # the rename fails: a folder is there
    assert path.read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.toml", "taken"]
