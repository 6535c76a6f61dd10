"""Themes are data files: the shipped ones parse; a bad file is an error line, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from didactyl_tui.tui.theme_files import load_themes, parse_theme, shipped_themes_dir


def test_shipped_themes_are_a_dark_and_a_light_one() -> None:
    loaded = load_themes([shipped_themes_dir()])
    assert loaded.errors == []
    by_name = {t.name: t for t in loaded.themes}
    assert by_name["didactyl-dark"].dark is True
    assert by_name["didactyl-light"].dark is False
    for theme in by_name.values():
        assert theme.primary and theme.background and theme.error and theme.success


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("name = [", "not valid TOML"),
        ('primary = "#112233"', "needs a name"),
        ('name = "x"', "needs a primary"),
        ('name = "x"\nprimary = "blurple"', "primary = 'blurple' is not a colour"),
        ('name = "x"\nprimary = "#112233"\nerror = 12', "error = 12 is not a colour"),
        ('name = "x"\nprimary = "#112233"\ndark = "yes"', "dark must be true or false"),
        ('name = "x"\nprimary = "#112233"\nshade = "#000000"', "unknown key(s) shade"),
        ('name = "x"\nprimary = "#112233"\nvariables = { a = 1 }', "[variables] must be a table of strings"),
    ],
)
def test_a_bad_theme_file_names_the_file_and_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_theme(text, "my.toml")
    assert str(info.value).startswith("my.toml: ") and problem in str(info.value)


def test_load_themes_keeps_the_good_and_reports_the_bad(tmp_path: Path) -> None:
    (tmp_path / "good.toml").write_text(
        'name = "good"\nprimary = "#336699"\n[variables]\n"footer-key-foreground" = "#fff"\n'
    )
    (tmp_path / "bad.toml").write_text('name = "bad"\nprimary = "nope"\n')
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "ignored.txt").write_text("not a theme")
    loaded = load_themes([tmp_path, tmp_path / "missing"])
    assert [t.name for t in loaded.themes] == ["good"]
    assert loaded.themes[0].variables == {"footer-key-foreground": "#fff"}
    assert len(loaded.errors) == 3
    assert any("bad.toml" in e for e in loaded.errors)
    assert any("binary.toml" in e for e in loaded.errors)
    assert any("missing" in e and "does not exist" in e for e in loaded.errors)


def test_a_later_folder_overrides_a_theme_by_name(tmp_path: Path) -> None:
    (tmp_path / "dark.toml").write_text('name = "didactyl-dark"\nprimary = "#010203"\n')
    loaded = load_themes([shipped_themes_dir(), tmp_path])
    (dark,) = [t for t in loaded.themes if t.name == "didactyl-dark"]
    assert dark.primary == "#010203"
