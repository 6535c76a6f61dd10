"""The one documented config: the example is current, every key documented, errors name file, key and line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from didactyl_tui.config import SECTIONS, EmbeddedRelayConfig, SoulSection
from didactyl_tui.config_file import config_path, data_dir, load_config, render_example
from didactyl_tui.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_config_toml_example_is_current() -> None:
    assert (ROOT / "config.toml.example").read_text("utf-8") == render_example(), (
        "regenerate it: python -m didactyl_tui.config_file > config.toml.example")


def test_every_key_is_documented_and_in_the_example() -> None:
    example = render_example()
    assert "\n[relays.embedded]\n" in example
    for name, cls in [*SECTIONS.items(), ("soul.sections", SoulSection), ("relays.embedded", EmbeddedRelayConfig)]:
        for f in dataclasses.fields(cls):
            assert f.metadata.get("doc"), f"[{name}] {f.name} has no documentation"
            if name != "soul.sections" and f.name not in ("sections", "embedded", "startup_events", "servers"):
                assert f"\n{f.name} = " in example, f"[{name}] {f.name} missing from the example"
    # Table arrays are shown as a commented example block instead.
    assert "# [[soul.sections]]" in example and "# [[agent.startup_events]]" in example
    for key in ("model", "api_base", "api_key_env", "timeout_s", "max_tool_rounds", "urls", "enabled",
                "embedded_port", "name", "about", "picture", "pubkey", "short_term_max_chars",
                "long_term_max_chars", "backend"):
        assert f"\n{key} = " in example


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[llm]\ntimeout_s = \"soon\"\n", "line 2: [llm.timeout_s] must be a number"),
        ("[relays]\n\nembedded_port = 70000\n", "line 3: [relays.embedded_port] must be at most 65535"),
        ("[relays]\nurls = [\"http://x\"]\n", "line 2: [relays.urls] 'http://x' is not a ws:// or wss:// URL"),
        ("[memory]\nbackend = \"mem0\"\n", "line 2: [memory.backend] must be one of"),
        ("[memory]\nshort_term_max_chars = 0\n", "[memory.short_term_max_chars] must be at least 1"),
        ("[agent]\ncolour = 1\n", "line 2: [agent.colour] is not a known key"),
        ("[nope]\n", "line 1: [nope] is not a known section"),
        ("[relays]\nembedded = false\n", "[relays.embedded] is false and no [relays] urls are set"),
        ("[[soul.sections]]\nsection = \"x\"\nrole = \"narrator\"\n", "[soul.sections.role] must be one of"),
        ("[llm\n", "not valid TOML"),
        ("[llm]\ntimeout_s = inf\n", "line 2: [llm.timeout_s] must be a finite number, not inf"),
        ("[llm]\ntimeout_s = nan\n", "line 2: [llm.timeout_s] must be a finite number, not nan"),
        ("[llm]\ntimeout_s = -5\n", "line 2: [llm.timeout_s] must be at least 1"),
        ("[llm]\ntimeout_s = 1e9\n", "line 2: [llm.timeout_s] must be at most 3600"),
        ("[relays]\ntimeout_s = inf\n", "line 2: [relays.timeout_s] must be a finite number"),
        ("[relays]\ntimeout_s = 0\n", "line 2: [relays.timeout_s] must be at least 0.1"),
        ("[llm]\nturn_timeout_s = -inf\n", "line 2: [llm.turn_timeout_s] must be a finite number"),
        ("[llm]\nmax_reply_chars = 0\n", "line 2: [llm.max_reply_chars] must be at least 1000"),
        ("[llm]\nmax_tool_calls_per_reply = 100000\n", "[llm.max_tool_calls_per_reply] must be at most 1000"),
        ("[llm]\nmax_tokens = -1\n", "line 2: [llm.max_tokens] must be at least 0"),
        ("[relays]\nurls = [\"ws://[::1\"]\n", "line 2: [relays.urls] 'ws://[::1' is not a valid URL"),
        ("[relays]\nurls = [\"wss://r.test:99999\"]\n", "[relays.urls] 'wss://r.test:99999' is not a valid URL"),
        ("[relays]\nurls = [\"wss://\"]\n", "[relays.urls] 'wss://' has no host"),
        ("[relays]\nurls = [\"wss://a b.test\"]\n", "contains spaces or control characters"),
        ("[relays]\nurls = [\"ws://[zz]:1\"]\n", "is not a valid URL"),
    ],
)
def test_bad_values_name_the_file_key_and_line(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert str(path) in str(info.value) and expected in str(info.value)


def test_environment_overrides_and_lookup_order(tmp_path: Path) -> None:
    path = write(tmp_path, '[llm]\nmodel = "openai/file"\n[relays]\nurls = ["wss://file.test"]\n')
    cfg = load_config(None, env={"DIDACTYL_CONFIG": str(path)})
    assert cfg.llm.model == "openai/file" and cfg.relays.urls == ["wss://file.test"] and cfg.path == path
    env = {"DIDACTYL_CONFIG": str(path), "DIDACTYL_MODEL": "openai/env", "DIDACTYL_API_BASE": "http://h:1/v1",
           "DIDACTYL_RELAYS": "wss://a.test, ws://b.test"}
    cfg = load_config(None, env=env)
    assert cfg.llm.model == "openai/env" and cfg.llm.api_base == "http://h:1/v1"
    # For this run only: the file's list stays the intent (what is published as the relay list).
    assert cfg.run_relay_urls == ["wss://a.test", "ws://b.test"] and cfg.relays.urls == ["wss://file.test"]
    with pytest.raises(ConfigError, match="DIDACTYL_RELAYS"):
        load_config(None, env={"DIDACTYL_RELAYS": "https://nope"})
    with pytest.raises(ConfigError, match=r"DIDACTYL_RELAYS: 'ws://\[::1' is not a valid URL"):
        load_config(None, env={"DIDACTYL_RELAYS": "ws://[::1"})
    cfg = load_config(None, env={"DIDACTYL_RELAYS": "ws://[::1]:7447", "XDG_CONFIG_HOME": str(tmp_path / "e")})
    assert cfg.run_relay_urls == ["ws://[::1]:7447"] and cfg.relays.urls == []
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.toml", env={})
    # No file at the default place: the defaults run.
    cfg = load_config(None, env={"XDG_CONFIG_HOME": str(tmp_path / "empty")})
    assert cfg.path is None and cfg.relays.embedded and cfg.memory.short_term_max_chars == 8000
    assert config_path(None, {"XDG_CONFIG_HOME": "/x"}) == Path("/x/didactyl/config.toml")
    assert data_dir({"XDG_DATA_HOME": "/d"}) == Path("/d/didactyl")
    assert data_dir({"DIDACTYL_DATA_DIR": "/e", "XDG_DATA_HOME": "/d"}) == Path("/e")


def test_startup_events_are_a_table_array_of_checked_entries(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, '[[agent.startup_events]]\nkind = 1\ncontent = "hi"\ntags = [["t", "x"]]\n'), {})
    assert [(e.kind, e.content, e.tags) for e in cfg.agent.startup_events] == [(1, "hi", [["t", "x"]])]
    with pytest.raises(ConfigError, match=r"line 3: \[agent\.startup_events\.tags\] must be a list of lists"):
        load_config(write(tmp_path, '[[agent.startup_events]]\nkind = 1\ntags = ["t", "x"]\n'), {})
    with pytest.raises(ConfigError, match=r"\[agent\.startup_events\.kind\] must be at most 65535"):
        load_config(write(tmp_path, '[[agent.startup_events]]\nkind = 70000\n'), {})
