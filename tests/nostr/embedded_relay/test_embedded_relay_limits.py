"""The embedded relay's limits: the config and RelayLimits agree, [relays.embedded] parses with clear
errors, compiled filters match exactly like nostr.filters, and the token buckets refill as stated."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from didactyl_tui.config import EmbeddedRelayConfig
from didactyl_tui.config_file import load_config
from didactyl_tui.errors import ConfigError, RelayError
from didactyl_tui.nostr.embedded_relay.limits import RelayLimits, TokenBucket
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.embedded_relay.subscriptions import CompiledFilter, tag_index
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.filters import matches


def test_every_relay_limit_is_a_documented_config_key_with_the_same_default() -> None:
    config_fields = {f.name: f for f in dataclasses.fields(EmbeddedRelayConfig)}
    for f in dataclasses.fields(RelayLimits):
        assert f.name in config_fields, f"[relays.embedded] {f.name} is missing"
        assert config_fields[f.name].default == f.default, f.name
        assert config_fields[f.name].metadata.get("doc")
    assert EmbeddedRelayConfig(max_connections=7).relay_limits() == RelayLimits(max_connections=7)


def test_relay_options_carry_the_allow_list() -> None:
    cfg = EmbeddedRelayConfig()
    options = cfg.relay_options("aa" * 32, "bb" * 32)
    assert options["allowed_writers"] == ["aa" * 32, "bb" * 32]
    # Gift wraps (throwaway keys) are taken for the agent, and for the admin and [dm] allow: the agent's replies.
    assert options["gift_wrap_recipients"] == ["aa" * 32, "bb" * 32]
    assert cfg.relay_options("aa" * 32, None, ["cc" * 32])["gift_wrap_recipients"] == ["aa" * 32, "cc" * 32]
    assert json.loads(json.dumps(options)) == options  # reaches a relay process as JSON
    assert EmbeddedRelay(Path("unused.db"), **options).limits == RelayLimits()
    with pytest.raises(RelayError, match="unknown embedded relay limits: max_sockets"):
        EmbeddedRelay(Path("unused.db"), limits={"max_sockets": 1})
    assert EmbeddedRelayConfig(allow_list=False).relay_options("aa" * 32, None)["allowed_writers"] is None


@pytest.mark.parametrize(("text", "check"), [
    ("[relays.embedded]\nmax_connections = 10\n", lambda c: c.relays.embedded.max_connections == 10),
    ("[relays]\nembedded = true\n", lambda c: c.relays.embedded.enabled and bool(c.relays.embedded)),
    ('[relays]\nurls = ["wss://x.test"]\nembedded = false\n', lambda c: not c.relays.embedded),
    ('[relays]\nurls = ["wss://x.test"]\n[relays.embedded]\nenabled = false\n', lambda c: not c.relays.embedded),
])
def test_relays_embedded_table_and_the_older_boolean(tmp_path: Path, text: str, check: Any) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    assert check(load_config(path, env={}))


@pytest.mark.parametrize(("text", "expected"), [
    ("[relays.embedded]\n\nmax_connections = 0\n", "line 3: [relays.embedded.max_connections] must be at least 1"),
    ("[relays.embedded]\nstranger_share = 2.0\n", "line 2: [relays.embedded.stranger_share] must be at most 1.0"),
    ("[relays.embedded]\nmax_sockets = 1\n", "line 2: [relays.embedded.max_sockets] is not a known key"),
])
def test_bad_relay_limits_name_the_key_and_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert expected in str(info.value)


PUBKEYS = ["aa" * 32, "bb" * 32]
events = st.builds(
    lambda n, pubkey, kind, t, tags: Event(f"{n:064x}", pubkey, t, kind, tuple(tuple(x) for x in tags), "", "0" * 128),
    st.integers(0, 5), st.sampled_from(PUBKEYS), st.sampled_from([0, 1, 7, 30078]), st.integers(0, 5),
    st.lists(st.lists(st.sampled_from(["d", "t", "p", "x", "y", ""]), min_size=0, max_size=3), max_size=4),
)
filters = st.fixed_dictionaries({}, optional={
    "ids": st.lists(st.sampled_from([f"{n:064x}" for n in range(6)]), max_size=2),
    "authors": st.lists(st.sampled_from(PUBKEYS), max_size=2),
    "kinds": st.lists(st.sampled_from([0, 1, 7, 30078]), max_size=2),
    "since": st.integers(0, 5), "until": st.integers(0, 5),
    "#d": st.lists(st.sampled_from(["x", "y", ""]), max_size=2),
    "#t": st.lists(st.sampled_from(["x", "y", "d"]), max_size=2),
})


@settings(max_examples=300, deadline=None)
@given(ev=events, flt=filters)
def test_compiled_filters_match_exactly_like_nostr_filters(ev: Event, flt: dict[str, Any]) -> None:
    assert CompiledFilter.of(flt).matches(ev, tag_index(ev)) == matches(flt, ev)


def test_token_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(rate=10, burst=5)
    now = bucket.stamp
    assert all(bucket.take(1, now) for _ in range(5)) and not bucket.take(1, now)
    assert bucket.take(1, now + 0.15) and not bucket.take(1, now + 0.15)
    assert sum(bucket.take(1, now + 100) for _ in range(10)) == 5
    assert TokenBucket(rate=0, burst=1).take(10**9)  # 0: switched off
