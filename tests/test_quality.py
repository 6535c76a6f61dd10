"""Project-wide promises checked on every run: the layer contract and a clean ruff."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

from didactyl_tui.config import setting as _cfg_field

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    found = Path(sys.executable).with_name(name)
    return str(found) if found.exists() else (shutil.which(name) or name)


def test_import_contract_layers_point_one_way() -> None:
    proc = subprocess.run([_tool("lint-imports")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_clean() -> None:
    proc = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_config_example_is_current() -> None:
    from didactyl_tui.config_file import render_example

    assert (ROOT / "config.toml.example").read_text("utf-8") == render_example()


# --- docs/configuration.md: generated from config.py, so it cannot drift ----------------------------------------


def test_configuration_reference_is_current() -> None:
    from didactyl_tui.actions import KEY_ACTIONS
    from didactyl_tui.config_reference import render_reference

    expected = render_reference(KEY_ACTIONS)
    assert (ROOT / "docs" / "configuration.md").read_text("utf-8") == expected, (
        "regenerate: python scripts/make_config_reference.py")


def test_configuration_reference_names_every_environment_variable_the_code_reads() -> None:
    import re

    names = set()
    for path in (ROOT / "didactyl_tui").rglob("*.py"):
        names |= set(re.findall(r"\bDIDACTYL_[A-Z0-9_]*[A-Z0-9]\b", path.read_text("utf-8")))
    assert {"DIDACTYL_MODEL", "DIDACTYL_NSEC", "DIDACTYL_CONFIG"} <= names  # the scan itself works
    reference = (ROOT / "docs" / "configuration.md").read_text("utf-8")
    missing = sorted(n for n in names if f"| `{n}` |" not in reference)
    assert not missing, f"add to ENV_OVERRIDES or OTHER_ENV in didactyl_tui/config_reference.py: {missing}"


def test_documented_environment_overrides_really_override() -> None:
    from didactyl_tui.config import Config
    from didactyl_tui.config_file import apply_env
    from didactyl_tui.config_reference import ENV_OVERRIDES

    assert ENV_OVERRIDES
    for dotted, var in ENV_OVERRIDES.items():
        section, key = dotted.split(".", 1)
        before = getattr(getattr(Config(), section), key)
        value = "wss://relay.example" if isinstance(before, list) else "override-value"
        cfg = apply_env(Config(), {var: value})
        # $DIDACTYL_RELAYS is this run's relays: [relays] urls stays the file's (the published intent).
        after = cfg.run_relay_urls if dotted == "relays.urls" else getattr(getattr(cfg, section), key)
        assert after != before and value in (after if isinstance(after, list) else [after]), (dotted, var, after)


@dataclasses.dataclass
class _Leaf:
    """A nested table."""

    depth: int = _cfg_field(3, "How deep.", min=1, max=9)
    cap: float | None = _cfg_field(None, "No cap when unset.")


@dataclasses.dataclass
class _Row:
    """One row of a table array."""

    label: str = _cfg_field("x", "A label.", choices=("x", "y"))


@dataclasses.dataclass
class _Branch:
    """A section with a nested table and a table array."""

    flag: bool = _cfg_field(True, "A switch.")
    leaf: _Leaf = dataclasses.field(default_factory=_Leaf, metadata={"doc": "The nested table."})
    rows: list[_Row] = _cfg_field([], "The rows.")


def test_configuration_reference_renders_nested_tables_and_table_arrays() -> None:
    from didactyl_tui.config_reference import render_reference

    text = render_reference({"go": "do it (g)"}, sections={"tree": _Branch})
    assert "## `[tree]`" in text and "| `flag` | boolean | `true` |" in text
    assert "## `[tree.leaf]`" in text and "| `depth` | integer | `3` | 1 to 9 |" in text
    assert "| `cap` | number, optional | (unset) |" in text
    assert "| `rows` | table array, see `[[tree.rows]]` | `[]` |" in text
    assert "## `[[tree.rows]]`" in text and '| `label` | string | `"x"` | `"x"`, `"y"` |' in text
    assert text.index("## `[tree]`") < text.index("## `[tree.leaf]`") < text.index("## `[keys]`")
    assert "| `go` | do it (g) |" in text


# --- README: the pictures are there and secret-free, every headless command is documented ----------------------


def _subcommands(parser) -> list[str]:
    import argparse

    names: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                inner = _subcommands(sub)
                names += [f"{name} {n}" for n in inner] if inner else [name]
    return names


def test_readme_documents_every_headless_command() -> None:
    from didactyl_tui.cli.parser import build_parser

    commands = _subcommands(build_parser())
    assert "memory save" in commands and "chat" in commands  # the walk itself works
    readme = (ROOT / "README.md").read_text("utf-8")
    missing = [c for c in commands if f"`didactyl {c}" not in readme]
    assert not missing, f"README.md's headless commands lack: {missing}"


def test_readme_pictures_exist_and_show_no_secret() -> None:
    import re

    readme = (ROOT / "README.md").read_text("utf-8")
    pictures = re.findall(r"!\[[^\]]*\]\((docs/images/[^)]+\.svg)\)", readme)
    assert len(pictures) >= 2, pictures
    for picture in pictures:
        svg = (ROOT / picture).read_text("utf-8")
        assert svg.lstrip().startswith("<svg"), picture
        assert not re.search(r"nsec1[02-9ac-hj-np-z]{20,}", svg), f"{picture} shows an nsec"
    for quick_start in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "api_base"):
        assert quick_start in readme


def test_import_contracts_say_what_we_mean() -> None:
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["importlinter"]["contracts"]
    by_name = {c["name"]: c for c in contracts}
    views = by_name["The views (tui, cli) import only the service package (plus config and errors)"]
    assert set(views["source_modules"]) == {"didactyl_tui.tui", "didactyl_tui.cli"}
    assert set(views["forbidden_modules"]) == {"didactyl_tui.agent", "didactyl_tui.nostr"}
    nostr = by_name["nostr imports nothing of ours above it"]
    assert {"didactyl_tui.agent", "didactyl_tui.service", "didactyl_tui.config",
            "didactyl_tui.config_file"} <= set(nostr["forbidden_modules"])


def test_views_use_no_tricks_the_contracts_cannot_see() -> None:
    """No importlib around the contract; no dispatch by a type's name or duck-typed enum values in the TUI."""
    views = sorted([*(ROOT / "didactyl_tui" / "tui").rglob("*.py"), *(ROOT / "didactyl_tui" / "cli").rglob("*.py")])
    for path in views:
        text = path.read_text("utf-8")
        assert "importlib" not in text, path
        assert "__name__ ==" not in text, path
        assert 'getattr(' not in text or '"value"' not in text, path


def test_no_module_of_the_package_is_over_400_lines() -> None:
    """A room is read in one sitting: a module that grows past this is split by what its parts own (#22)."""
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "didactyl_tui").rglob("*.py")
            if (n := len(p.read_text("utf-8").splitlines())) > 400}
    assert not long, f"split these by what their parts own: {long}"


def test_tests_click_only_where_the_click_is_checked() -> None:
    """Textual's ``Pilot.click`` reads the target's place before the app runs and only says in a return value that it
    missed (a widget not laid out yet: a test waited 30 s for a retry that was never clicked). The tests click with
    ``tui_support.click``, which waits for the target to be on screen in one place and fails unless it landed."""
    import re

    direct = re.compile(r"\bpilot\.(?:click|double_click|triple_click)\(")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "tests").rglob("*.py")) if p.name != "tui_support.py"
             for n, line in enumerate(p.read_text("utf-8").splitlines(), 1) if direct.search(line)]
    assert not found, f"click with tui_support.click: {found}"
