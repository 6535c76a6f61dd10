"""docs/configuration.md, rendered from the config definition (``didactyl_tui/config.py``) so it cannot drift.

``scripts/make_config_reference.py`` writes it; tests/test_quality.py checks it is current.
"""

from __future__ import annotations

import dataclasses
from typing import Any, get_args, get_origin, get_type_hints

from .config import SECTIONS
from .config_file import toml_value

# Keys an environment variable overrides (applied by apply_env; a test checks each one really does).
ENV_OVERRIDES: dict[str, str] = {
    "llm.model": "DIDACTYL_MODEL",
    "llm.api_base": "DIDACTYL_API_BASE",
    "relays.urls": "DIDACTYL_RELAYS",
    "signer.bunker": "DIDACTYL_BUNKER",
}

# Every other variable the app reads (a test checks each DIDACTYL_* name in the code is listed somewhere here).
OTHER_ENV: dict[str, str] = {
    "DIDACTYL_CONFIG": "The config file (after `--config`, before `$XDG_CONFIG_HOME/didactyl/config.toml`).",
    "DIDACTYL_DATA_DIR": "The data folder (default `$XDG_DATA_HOME/didactyl`, i.e. `~/.local/share/didactyl`).",
    "DIDACTYL_NSEC": "The agent's secret key (nsec or hex); wins over `<data dir>/agent.key`. Never logged or shown.",
    "DIDACTYL_ADMIN_NSEC": "For `didactyl attach`: the admin's secret key (your key, the one the agent's "
                           "`[admin] pubkey` names); wins over the admin key file. Never logged or shown.",
    "DIDACTYL_DEBUG": "Any value: headless commands print the traceback of an unexpected error and log at DEBUG.",
    "DIDACTYL_FIRST_PAINT_FILE": "For `bench/startup_bench.py`: the app writes the time of its first frame there.",
    "DIDACTYL_TEST_MODEL_HELPER": "For the test suite only (its conftest sets it): the command that starts the model "
                                  "helper, a JSON list, instead of `python -m didactyl_tui.agent.llm.worker`.",
    "XDG_CONFIG_HOME": "Base of the default config path (default `~/.config`).",
    "XDG_DATA_HOME": "Base of the default data folder (default `~/.local/share`).",
}


def _md(text: str) -> str:
    """Table-cell safe: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _type_name(hint: Any) -> str:
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if hint in names:
        return names[hint]
    origin = get_origin(hint)
    args = [a for a in get_args(hint) if a is not type(None)]
    if origin is not list and origin is not dict and len(args) < len(get_args(hint)):  # X | None
        return " or ".join(_type_name(a) for a in args) + ", optional"
    if origin is list:
        (item,) = get_args(hint) or (Any,)
        return "table array" if dataclasses.is_dataclass(item) else f"list of {_type_name(item)}s"
    if origin is dict:
        return "table"
    if dataclasses.is_dataclass(hint):
        return "table"
    return getattr(hint, "__name__", str(hint))


def _allowed(meta: Any) -> str:
    parts = []
    if "choices" in meta:
        parts.append(", ".join(f"`{toml_value(c)}`" for c in meta["choices"]))
    if "min" in meta and "max" in meta:
        parts.append(f"{meta['min']} to {meta['max']}")
    elif "min" in meta:
        parts.append(f"≥ {meta['min']}")
    elif "max" in meta:
        parts.append(f"≤ {meta['max']}")
    return "; ".join(parts)


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _default_text(f: dataclasses.Field[Any]) -> str:
    default = _default_of(f)
    return "(unset)" if default is None or default is dataclasses.MISSING else f"`{_md(toml_value(default))}`"


def _render_table(dotted: str, cls: type, array: bool = False) -> list[str]:
    """One ``[dotted]`` (or ``[[dotted]]``) section, then its nested tables, depth first."""
    hints = get_type_hints(cls)
    header = f"[[{dotted}]]" if array else f"[{dotted}]"
    out = [f"## `{header}`", "", _md(cls.__doc__ or ""), ""]
    rows: list[str] = []
    nested: list[tuple[str, type, bool]] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        item = (get_args(hint) or (None,))[0] if get_origin(hint) is list else None
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            nested.append((f"{dotted}.{f.name}", hint, False))
            continue
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            nested.append((f"{dotted}.{f.name}", item, True))
            count = len(_default_of(f) or [])
            default = "`[]`" if not count else f"{count} tables"
            rows.append(f"| `{f.name}` | table array, see `[[{dotted}.{f.name}]]` | {default} | | | "
                        f"{_md(f.metadata.get('doc', ''))} |")
            continue
        env = ENV_OVERRIDES.get(f"{dotted}.{f.name}", "")
        rows.append(
            f"| `{f.name}` | {_md(_type_name(hint))} | {_default_text(f)} | {_md(_allowed(f.metadata))} "
            f"| {f'`{env}`' if env else ''} | {_md(f.metadata.get('doc', ''))} |"
        )
    if rows:
        out += ["| Key | Type | Default | Allowed | Env override | Meaning |", "|---|---|---|---|---|---|", *rows, ""]
    for name, sub, is_array in nested:
        out += _render_table(name, sub, is_array)
    return out


def render_reference(key_actions: dict[str, str] | None = None, sections: dict[str, type] | None = None) -> str:
    """``docs/configuration.md``: every section and key, its type, default, range and environment override,
    rendered from the dataclasses above (nested tables and table arrays included) so it cannot drift.
    ``key_actions`` (action id -> what it does, from the TUI) fills the ``[keys]`` table."""
    sections = SECTIONS if sections is None else sections
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated from didactyl_tui/config.py: python scripts/make_config_reference.py"
        " (tests/test_quality.py checks it is current). -->",
        "",
        "Every key is optional: with no file at all the app runs on the defaults (an embedded relay, no model until",
        "you set one). The file is TOML, found via `--config PATH`, then `$DIDACTYL_CONFIG`, then",
        "`$XDG_CONFIG_HOME/didactyl/config.toml` (`~/.config/didactyl/config.toml`). A commented example with every",
        "default is [config.toml.example](../config.toml.example). A bad value stops the app with one line naming the",
        "file, the key, its line and what is wrong.",
        "",
        "Which value wins: an environment override (the *Env override* column) beats the file, which beats the",
        "default. Two keys can also be changed from inside the app and are then remembered in `<data dir>/state.toml`",
        "(never written back to your config): the model (Ctrl+L), which `$DIDACTYL_MODEL` still beats, and the theme",
        "(Ctrl+T), which beats `[ui] theme`.",
        "",
        "## Environment variables",
        "",
        "| Variable | Meaning |",
        "|---|---|",
    ]
    for dotted, var in ENV_OVERRIDES.items():
        section, key = dotted.rsplit(".", 1)
        how = (" for this run only (comma-separated ws:// or wss:// URLs): the agent's published relay list (kind "
               "10002) still comes from the file, and is not published while the override is in effect") \
            if key == "urls" else ""
        out.append(f"| `{var}` | Overrides `[{section}] {key}`{how}. |")
    for var, meaning in OTHER_ENV.items():
        out.append(f"| `{var}` | {_md(meaning)} |")
    out += [
        "| *(named by `api_key_env`)* | API keys: `[llm] api_key_env` names the model's key variable (empty: the "
        "provider's usual one, e.g. `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`); `[honcho] api_key_env` Honcho's. Keys "
        "never go in the file. |",
        "",
    ]
    for name, cls in sections.items():
        out += _render_table(name, cls)
    out += [
        "## `[keys]`",
        "",
        'Remap key bindings: `action = "key"`, several keys comma-separated (`"f5,f12"`), e.g. '
        '`send = "ctrl+j"` where a terminal swallows a key. An unknown action or an empty key is reported when '
        "the app starts.",
        "",
    ]
    if key_actions:
        out += ["| Action | What it does (default keys) |", "|---|---|"]
        out += [f"| `{action}` | {_md(what)} |" for action, what in key_actions.items()]
        out.append("")
    return "\n".join(out)
