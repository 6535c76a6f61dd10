"""The config file: where it is, how it is read into a :class:`~didactyl_tui.config.Config` and checked, the
environment's overrides, and ``config.toml.example`` rendered from the documented fields (``render_example``; a
test keeps the file current). Problems raise :class:`ConfigError` naming the file, the key, its line and what is
wrong.

Lookup order for the file: ``--config``, ``$DIDACTYL_CONFIG``, ``$XDG_CONFIG_HOME/didactyl/config.toml``
(``~/.config`` when unset). A missing file is fine: the defaults run out of the box. Environment overrides
(``DIDACTYL_MODEL``, ``DIDACTYL_API_BASE``, ``DIDACTYL_RELAYS``, ``DIDACTYL_BUNKER``) win over the file.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints
from urllib.parse import urlsplit

from .config import (
    SECTIONS,
    Config,
)
from .config_mcp import mcp_server_problem
from .errors import ConfigError

# --- locations ----------------------------------------------------------------------------


def config_path(cli_path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    if cli_path:
        return Path(cli_path).expanduser()
    if env.get("DIDACTYL_CONFIG"):
        return Path(env["DIDACTYL_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "didactyl" / "config.toml"


def data_dir(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    if env.get("DIDACTYL_DATA_DIR"):
        return Path(env["DIDACTYL_DATA_DIR"]).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "didactyl"


# --- loading ------------------------------------------------------------------------------


def _line_of(text: str, section: str | None, key: str) -> int | None:
    """Best-effort line number of ``key`` (inside ``[section]`` when given) for error messages."""
    current: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        m = re.match(r"^\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?", s)
        if m:
            current = m.group(1)
            if section is None and current == key:
                return n
            continue
        if (section is None or current == section or (current or "").startswith(section + ".")) and re.match(
            rf"^{re.escape(key)}\s*=", s
        ):
            return n
    return None


class _Loader:
    def __init__(self, path: Path | None, text: str) -> None:
        self.path = path
        self.text = text

    def fail(self, section: str | None, key: str, what: str) -> ConfigError:
        where = str(self.path) if self.path else "config"
        line = _line_of(self.text, section, key)
        dotted = f"{section}.{key}" if section else key
        loc = f"{where}, line {line}" if line else where
        return ConfigError(f"{loc}: [{dotted}] {what}", "Bad config")

    def coerce(self, section: str, key: str, value: Any, hint: Any, meta: dict[str, Any]) -> Any:
        origin = get_origin(hint)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if isinstance(value, bool) and "enabled" in {f.name for f in dataclasses.fields(hint)}:
                make: Callable[..., Any] = hint  # the section's dataclass
                return make(enabled=value)  # the older `embedded = true/false`
            return self.build(f"{section}.{key}", hint, value)
        if hint is bool:
            if not isinstance(value, bool):
                raise self.fail(section, key, f"must be true or false, not {value!r}")
        elif hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(section, key, f"must be a whole number, not {value!r}")
        elif hint is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self.fail(section, key, f"must be a number, not {value!r}")
            value = float(value)
            if not math.isfinite(value):
                raise self.fail(section, key, f"must be a finite number, not {value!r}")
        elif hint is str:
            if not isinstance(value, str):
                raise self.fail(section, key, f"must be a string, not {value!r}")
        elif origin is dict:  # [[mcp.servers]] env and headers: names to strings
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise self.fail(section, key, "must be a table of strings")
        elif origin is list:
            (item,) = get_args(hint)
            if not isinstance(value, list):
                raise self.fail(section, key, "must be a list")
            if item is str:
                if not all(isinstance(v, str) for v in value):
                    raise self.fail(section, key, "must be a list of strings")
            elif isinstance(item, type) and dataclasses.is_dataclass(item):
                value = [self.build(f"{section}.{key}", item, v) for v in value]
            elif get_origin(item) is list and not all(
                    isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value):
                raise self.fail(section, key, "must be a list of lists of strings")
        if "min" in meta and value < meta["min"]:
            raise self.fail(section, key, f"must be at least {meta['min']}, not {value!r}")
        if "max" in meta and value > meta["max"]:
            raise self.fail(section, key, f"must be at most {meta['max']}, not {value!r}")
        if "choices" in meta and value not in meta["choices"]:
            options = ", ".join(repr(c) for c in meta["choices"])
            raise self.fail(section, key, f"must be one of {options}, not {value!r}")
        return value

    def build(self, section: str, cls: type, raw: Any) -> Any:
        if not isinstance(raw, dict):
            raise self.fail(None, section, "must be a table")
        hints = get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in fields:
                known = ", ".join(fields)
                raise self.fail(section, key, f"is not a known key (known: {known})")
            kwargs[key] = self.coerce(section, key, value, hints[key], dict(fields[key].metadata))
        return cls(**kwargs)


def config_error(path: Path | None, section: str | None, key: str, what: str) -> ConfigError:
    """A ConfigError naming the file, the key and its line, for checks made outside this module
    (e.g. a pubkey or a soul file, checked where they are used)."""
    text = ""
    if path is not None:
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            text = ""
    return _Loader(path, text).fail(section, key, what)


def parse_config(text: str, path: Path | None = None) -> Config:
    """Parse TOML text into a :class:`Config` (no environment overrides)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = str(path) if path else "config"
        raise ConfigError(f"{where}: not valid TOML: {exc}", "Bad config") from None
    loader = _Loader(path, text)
    cfg = Config(path=path)
    for name, value in raw.items():
        if name in SECTIONS:
            setattr(cfg, name, loader.build(name, SECTIONS[name], value))
        elif name == "keys":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise loader.fail(None, "keys", "must be a table of action = \"key\" strings")
            cfg.keys = dict(value)
        else:
            raise loader.fail(None, name, f"is not a known section (known: {', '.join([*SECTIONS, 'keys'])})")
    return cfg


MAX_RELAY_URLS = 64
MAX_URL_CHARS = 2048


def relay_url_problem(url: str) -> str | None:
    """What is wrong with a relay URL (None when it is a usable ws:// or wss:// URL)."""
    if len(url) > MAX_URL_CHARS:
        return f"is longer than {MAX_URL_CHARS} characters"
    if any(ch.isspace() or ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 for ch in url):
        return "contains spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in ("ws", "wss"):
        return "is not a ws:// or wss:// URL"
    if not parts.hostname:
        return "has no host"
    if parts.netloc.startswith("[") and not _is_ipv6(parts.hostname):
        return "has a bracketed host that is not an IPv6 address"
    return None


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def apply_env(cfg: Config, env: dict[str, str] | None = None) -> Config:
    """Environment overrides win over the file."""
    env = dict(os.environ) if env is None else env
    if env.get("DIDACTYL_MODEL"):
        cfg.llm.model = env["DIDACTYL_MODEL"].strip()
    if env.get("DIDACTYL_API_BASE"):
        cfg.llm.api_base = env["DIDACTYL_API_BASE"].strip()
    if env.get("DIDACTYL_RELAYS") is not None and "DIDACTYL_RELAYS" in env:
        urls = [u.strip() for u in env["DIDACTYL_RELAYS"].split(",") if u.strip()]
        if len(urls) > MAX_RELAY_URLS:
            raise ConfigError(f"$DIDACTYL_RELAYS: {len(urls)} URLs; at most {MAX_RELAY_URLS}", "Bad config")
        for u in urls:
            problem = relay_url_problem(u)
            if problem:
                raise ConfigError(f"$DIDACTYL_RELAYS: {u[:200]!r} {problem}", "Bad config")
        cfg.relays_override = urls  # for this run only: [relays] urls stays the published intent
    if env.get("DIDACTYL_BUNKER", "").strip():
        cfg.signer.bunker = env["DIDACTYL_BUNKER"].strip()
    return cfg


def validate(cfg: Config) -> Config:
    """Cross-field checks that types alone cannot express."""
    loader = _Loader(cfg.path, cfg.path.read_text("utf-8") if cfg.path and cfg.path.exists() else "")
    if len(cfg.relays.urls) > MAX_RELAY_URLS:
        raise loader.fail("relays", "urls", f"lists {len(cfg.relays.urls)} URLs; at most {MAX_RELAY_URLS}")
    for u in cfg.relays.urls:
        problem = relay_url_problem(u)
        if problem:
            raise loader.fail("relays", "urls", f"{u[:200]!r} {problem}")
    if not cfg.run_relay_urls and not cfg.relays.embedded:
        raise loader.fail("relays", "embedded", "is false and no [relays] urls are set: the agent needs a relay")
    try:
        ipaddress.ip_address(cfg.relays.embedded_host)
    except ValueError:
        raise loader.fail("relays", "embedded_host", f"must be an IP address of this machine (127.0.0.1, or a LAN "
                          f"address such as 192.168.1.20), not {cfg.relays.embedded_host[:100]!r}") from None
    if cfg.relays.penalty_max_s < cfg.relays.penalty_base_s:
        raise loader.fail("relays", "penalty_max_s", f"must be at least penalty_base_s ({cfg.relays.penalty_base_s:g}),"
                          f" not {cfg.relays.penalty_max_s:g}")
    mcp_problem = mcp_server_problem(cfg.mcp.servers)
    if mcp_problem is not None:
        raise loader.fail("mcp.servers", *mcp_problem)
    return cfg


def load_config(cli_path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> Config:
    """Find, read, parse, apply environment overrides, validate."""
    env = dict(os.environ) if env is None else env
    path = config_path(cli_path, env)
    explicit = bool(cli_path or env.get("DIDACTYL_CONFIG"))
    if path.exists():
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read: {exc}", "Bad config") from None
        cfg = parse_config(text, path)
    elif explicit:
        raise ConfigError(f"{path}: no such config file", "Bad config")
    else:
        cfg = Config(path=None)
    cfg.origin = path
    return validate(apply_env(cfg, env))


# --- the documented example ---------------------------------------------------------------


def toml_value(value: Any) -> str:
    """``value`` as TOML writes it (the example file and the configuration reference show defaults so)."""
    import tomli_w

    if isinstance(value, dict):  # an inline table (tomli_w writes a dict as a table of its own)
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    return tomli_w.dumps({"x": value}).split("=", 1)[1].strip()


def _render_table(name: str, cls: type) -> list[str]:
    out = [*(f"# {line.strip()}" for line in (cls.__doc__ or "").splitlines() if line.strip()), f"[{name}]"]
    subtables: list[tuple[str, type]] = []
    for f in dataclasses.fields(cls):
        doc = f.metadata.get("doc", "")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            subtables.append((f"{name}.{f.name}", type(default)))
            continue
        out.append(f"# {doc}")
        if f.name not in ("sections", "startup_events", "servers"):  # table arrays: a commented example block below
            out.append(f"{f.name} = {toml_value(default)}")
    out.append("")
    for sub_name, sub_cls in subtables:
        out += _render_table(sub_name, sub_cls)
    return out


def render_example() -> str:
    """``config.toml.example``: every key, its default and its documentation."""
    from .actions import keys_documentation  # the one action table (pure data)

    out = [
        "# didactyl configuration. Every key is optional: the defaults run with no setup.",
        "# Found via --config, $DIDACTYL_CONFIG, then $XDG_CONFIG_HOME/didactyl/config.toml.",
        "# Environment overrides: DIDACTYL_CONFIG, DIDACTYL_DATA_DIR, DIDACTYL_NSEC (the agent's key),",
        "# DIDACTYL_MODEL, DIDACTYL_API_BASE, DIDACTYL_RELAYS (comma-separated URLs),",
        "# DIDACTYL_BUNKER (a bunker:// URI: the agent's key in a remote signer).",
        "# Generated from didactyl_tui/config.py (python -m didactyl_tui.config_file > config.toml.example).",
        "",
    ]
    for name, cls in SECTIONS.items():
        out += _render_table(name, cls)
    out += [
        "# Soul sections, in order (omit them all for the built-in default). Example:",
        "# [[soul.sections]]",
        '# section = "soul"',
        '# role = "system"',
        '# content = "You are didactyl..."',
        "# skip_if_empty = true",
        "# [[soul.sections]]",
        '# section = "short_term_memory"',
        '# role = "system"',
        '# tool = "memory_short_term_read"',
        '# audience = "admin"          # who may read it: admin or everyone (empty: as its tool is declared)',
        "",
        "# Startup events, in order (none by default). Example:",
        "# [[agent.startup_events]]",
        "# kind = 1",
        '# content = "Hello, Nostr: I am an AI agent (didactyl)."',
        '# tags = [["t", "introductions"]]',
        "",
        "# MCP servers, in order (none by default; docs/mcp.md). Example:",
        "# [[mcp.servers]]",
        '# name = "everything"',
        '# command = "npx"',
        '# args = ["-y", "@modelcontextprotocol/server-everything"]',
        '# env = { API_TOKEN = "${MY_TOKEN}" }   # nothing else of your environment is passed on',
        "# [[mcp.servers]]",
        '# name = "remote"',
        '# url = "https://example.com/mcp"',
        '# headers = { Authorization = "Bearer ${REMOTE_TOKEN}" }',
        "",
        "# [keys]: remap key bindings, action = \"key\" (several keys: \"f5,f12\"); terminals swallow some keys.",
        "# Actions and their default keys (from didactyl_tui/actions.py, the one table of actions):",
        *keys_documentation(),
        "[keys]",
        '# send = "enter"',
        '# newline = "ctrl+j"',
        '# dry_run = "f5"',
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(render_example(), end="")
