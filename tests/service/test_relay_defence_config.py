"""The client's defences against a hostile relay are `[relays]` keys: range-checked, and what every relay
client of the service runs with."""

from __future__ import annotations

from pathlib import Path

import pytest

from didactyl_tui.config import Config
from didactyl_tui.config_file import load_config
from didactyl_tui.errors import ConfigError
from didactyl_tui.nostr import relay as relay_module
from didactyl_tui.nostr.relay_guard import FailedEvents
from didactyl_tui.service.app import AppService
from didactyl_tui.service.runtime import relay_client_defences

NSEC_ENV = {"DIDACTYL_NSEC": "1" * 64}


def test_the_config_defaults_are_the_clients_defaults() -> None:
    args = relay_client_defences(Config())
    assert args["verify_rate"] == relay_module.DEFAULT_VERIFY_RATE
    assert args["verify_burst"] == relay_module.DEFAULT_VERIFY_BURST
    assert args["frame_rate"] == relay_module.DEFAULT_FRAME_RATE
    assert args["frame_burst"] == relay_module.DEFAULT_FRAME_BURST
    assert args["health_window"] == relay_module.DEFAULT_HEALTH_WINDOW
    assert args["max_invalid_share"] == relay_module.DEFAULT_MAX_INVALID_SHARE
    assert args["penalty_base"] == relay_module.DEFAULT_PENALTY_BASE_S
    assert args["penalty_max"] == relay_module.DEFAULT_PENALTY_MAX_S
    assert args["failed_events"].capacity == FailedEvents().capacity


async def test_the_service_hands_the_keys_to_every_relay_client(tmp_path: Path) -> None:
    config = Config()
    config.relays.embedded_port = 0
    config.relays.urls = ["ws://127.0.0.1:9"]  # nobody listens: the client exists all the same
    config.relays.timeout_s = 0.5
    config.memory.backend = "none"
    config.agent.publish_profile = False
    r = config.relays
    r.verify_rate, r.verify_burst, r.frame_rate, r.frame_burst = 111.0, 22.0, 333.0, 44.0
    r.invalid_window, r.max_invalid_share, r.penalty_base_s, r.penalty_max_s = 50, 0.25, 2.0, 30.0
    r.failed_events_max = 777
    async with AppService(config, data_dir=tmp_path / "data", env=NSEC_ENV) as service:
        pool = service.parts.runtime.pool
        clients = [pool.client(url) for url in pool.urls]
        assert len(clients) == 2
        for client in clients:
            conn = client.connection
            verify, frames, health = client.incoming.verify_budget, conn.frame_budget, conn.health
            assert (verify.rate, verify.burst) == (111.0, 22.0)
            assert (frames.rate, frames.burst) == (333.0, 44.0)
            assert (health.window, health.max_invalid_share) == (50, 0.25)
            assert (conn.penalty_base, conn.penalty_max) == (2.0, 30.0)
            assert client.failed_events.capacity == 777
        assert clients[0].failed_events is clients[1].failed_events  # one memory for all relays


@pytest.mark.parametrize(("line", "says"), [
    ("max_invalid_share = 1.5", "[relays.max_invalid_share] must be at most 0.99, not 1.5"),
    ("verify_rate = 0", "[relays.verify_rate] must be at least 1, not 0"),
    ("frame_rate = inf", "[relays.frame_rate] must be a finite number, not inf"),
    ("invalid_window = 3", "[relays.invalid_window] must be at least 10, not 3"),
    ("failed_events_max = 0", "[relays.failed_events_max] must be at least 100, not 0"),
    ("penalty_base_s = 60\npenalty_max_s = 10", "[relays.penalty_max_s] must be at least penalty_base_s (60), not 10"),
])
def test_out_of_range_values_name_the_file_key_and_line(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"[relays]\nembedded_port = 0\n{line}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    assert says in caught.value.message
    assert f"{path}, line " in caught.value.message
