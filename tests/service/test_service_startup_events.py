"""[[agent.startup_events]] through the service and a real relay: published once, never duplicated on later
starts; a declared kind 0 replaces the config-managed profile; a bad declaration is one config error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_support import AGENT_KEY
from relay_servers import RelayUnderTest, fast_client_kwargs

from didactyl_tui.config import Config, StartupEventConfig
from didactyl_tui.errors import ConfigError
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService

PROFILE = json.dumps({"name": "Declared Didactyl", "about": "from startup_events"})


def config_for(url: str, *events: StartupEventConfig) -> Config:
    cfg = Config()
    cfg.relays.embedded, cfg.relays.urls, cfg.relays.timeout_s = False, [url], 2.0
    cfg.memory.backend = "none"
    cfg.agent.startup_events = list(events)
    return cfg


async def _held(url: str) -> list:
    async with RelayPool([url], **fast_client_kwargs()) as pool:
        return await pool.query([{"authors": [AGENT_KEY.public_key_hex], "kinds": [0, 1]}], timeout=3)


async def test_startup_events_are_published_once_across_restarts(rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    cfg = config_for(rust_relay.url, StartupEventConfig(1, "Hello, Nostr.", [["t", "introductions"]]),
                     StartupEventConfig(0, PROFILE))
    for start in (1_750_000_000, 1_750_000_600):  # a later start would sign a different event
        async with AppService(cfg, data_dir=tmp_path / "d", env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                              clock=lambda start=start: float(start), relay_client_options=fast_client_kwargs()):
            pass  # stop() lets the start-up publishes finish
    held = await _held(rust_relay.url)
    notes = [ev for ev in held if ev.kind == 1]
    assert [ev.content for ev in notes] == ["Hello, Nostr."] and ["t", "introductions"] in [list(t) for t in
                                                                                              notes[0].tags]
    [profile] = [ev for ev in held if ev.kind == 0]
    assert json.loads(profile.content) == json.loads(PROFILE)  # not the [agent] name/about one


async def test_a_bad_startup_event_is_a_config_error(rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    cfg = config_for(rust_relay.url, StartupEventConfig(0, "not json"))
    with pytest.raises(ConfigError, match=r"startup_events.*startup event #1.*JSON object"):
        async with AppService(cfg, data_dir=tmp_path / "d", env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                              relay_client_options=fast_client_kwargs()):
            pass
