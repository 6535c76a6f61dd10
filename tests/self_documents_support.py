"""Helpers for the soul and task-list tests against a real relay: a service on it, soul documents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_support import Clock
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs
from tui_support import TEST_KEY, make_config, make_env

from didactyl_tui.service.app import AppService

SOUL_TEXT = """{"format": "didactyl-soul/1", "sections": [
 {"section": "persona", "role": "system", "content": "You are PERSONA."},
 {"section": "tasks", "role": "system", "tool": "task_list"}]}"""


def soul(persona: str) -> str:
    """A soul document whose persona section says ``You are <persona>.``"""
    return SOUL_TEXT.replace("PERSONA", persona)


def service_on(relay: EmbeddedRelayUnderTest, data: Path, clock: Clock) -> AppService:
    """A service of the test key on ``relay`` only (no embedded relay, nothing published at start)."""
    cfg = make_config(urls=[relay.url], publish_profile=False)
    cfg.relays.embedded.enabled = False
    return AppService(cfg, data_dir=data, env=make_env(), clock=clock, relay_client_options=fast_client_kwargs())


async def stored(relay: EmbeddedRelayUnderTest, kind: int, d: str) -> list[Any]:
    """What the relay stores of the test key's ``kind``/``d`` (read from its own database)."""
    assert relay.relay is not None
    return await relay.relay.query([{"authors": [TEST_KEY.public_key_hex], "kinds": [kind], "#d": [d]}])
