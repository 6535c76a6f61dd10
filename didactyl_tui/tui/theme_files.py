"""Themes as data files: ``themes/*.toml`` (shipped) plus the user's ``[ui] themes_dir``.

``load_themes`` returns the themes it could read *and* one readable line per file it could not, so a
bad theme file becomes a warning at start instead of a crash.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

# Fields of textual.theme.Theme a file may set, and the ones that must be colours.
_COLOUR_KEYS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground", "background",
                "surface", "panel", "boost")
_KNOWN_KEYS = {f.name for f in fields(Theme)}


def shipped_themes_dir() -> Path:
    """The folder of themes that come with the package."""
    return Path(__file__).resolve().parent.parent / "themes"


@dataclass
class ThemeLoad:
    """What a scan of theme folders found."""

    themes: list[Theme] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_theme(text: str, source: str) -> Theme:
    """Build a Theme from TOML text; ``ValueError`` with a readable message names ``source``."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(raw) - _KNOWN_KEYS)
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {', '.join(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{source}: needs a name = \"...\"")
    if not isinstance(raw.get("primary"), str):
        raise ValueError(f"{source}: needs a primary colour")
    for key in _COLOUR_KEYS:
        if key in raw:
            value = raw[key]
            try:
                if not isinstance(value, str):
                    raise ColorParseError(f"{value!r}")
                Color.parse(value)
            except ColorParseError:
                raise ValueError(f"{source}: {key} = {value!r} is not a colour") from None
    if "dark" in raw and not isinstance(raw["dark"], bool):
        raise ValueError(f"{source}: dark must be true or false")
    variables = raw.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ValueError(f"{source}: [variables] must be a table of strings")
    try:
        return Theme(**raw)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: {exc}") from None


def load_themes(dirs: Iterable[Path | str]) -> ThemeLoad:
    """Read every ``*.toml`` in ``dirs`` (missing folders are skipped); later files win on a name clash."""
    found: dict[str, Theme] = {}
    errors: list[str] = []
    for folder in dirs:
        path = Path(folder).expanduser()
        if not path.is_dir():
            if str(folder):
                errors.append(f"theme folder {path} does not exist")
            continue
        for file in sorted(path.glob("*.toml")):
            try:
                theme = parse_theme(file.read_text("utf-8"), str(file))
            except (OSError, UnicodeDecodeError) as exc:
                errors.append(f"{file}: cannot read: {exc}")
                continue
            except ValueError as exc:
                errors.append(str(exc))
                continue
            found[theme.name] = theme
    return ThemeLoad(themes=list(found.values()), errors=errors)
