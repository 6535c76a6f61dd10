"""Helpers for the many-writers tests (#9): app services with one key on real relays, rust-nostr as a third
writer, and a relay that acknowledges every event and keeps none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_support import AGENT_KEY, Clock
from relay_servers import ScriptedConnection, ScriptedRelay, fast_client_kwargs

from didactyl_tui.config import Config
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.messages import RelayEose, RelayOk
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import DocumentChanged, ServiceWarning


def config_for(*urls: str) -> Config:
    cfg = Config()
    cfg.relays.embedded.enabled = False
    cfg.relays.urls = list(urls)
    cfg.relays.timeout_s = 10.0
    cfg.memory.backend = "none"
    cfg.agent.publish_profile = False
    return cfg


def service_for(data: Path, *urls: str, clock: Clock | None = None) -> AppService:
    kwargs: dict[str, Any] = {"clock": clock} if clock is not None else {}
    return AppService(config_for(*urls), data_dir=data, env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                      relay_client_options=fast_client_kwargs(), **kwargs)


def recorder(service: AppService) -> list[Any]:
    seen: list[Any] = []
    service.add_listener(seen.append)
    return seen


def conflicts(seen: list[Any]) -> list[DocumentChanged]:
    return [e for e in seen if isinstance(e, DocumentChanged) and e.lost_local]


def warnings(seen: list[Any]) -> list[str]:
    return [e.message for e in seen if isinstance(e, ServiceWarning)]


def rust_memory_event(text: str, created_at: int, d: str = "short_term_memory") -> Event:
    """A memory version written by rust-nostr (nostr-sdk) with the agent's key: NIP-44 to self, no base tag."""
    import nostr_sdk

    keys = nostr_sdk.Keys.parse(AGENT_KEY.secret_hex())
    payload = nostr_sdk.nip44_encrypt(keys.secret_key(), keys.public_key(), text, nostr_sdk.Nip44Version.V2)
    built = (nostr_sdk.EventBuilder(nostr_sdk.Kind(30078), payload)
             .tags([nostr_sdk.Tag.identifier(d), nostr_sdk.Tag.parse(["app", "didactyl"])])
             .custom_created_at(nostr_sdk.Timestamp.from_secs(created_at))
             .finalize(keys))
    return Event.from_json(built.as_json())


async def rust_publish(url: str, ev: Event) -> None:
    """Publish with rust-nostr's client, as a third program would."""
    import nostr_sdk

    client = nostr_sdk.Client()
    await client.add_relay(nostr_sdk.RelayUrl.parse(url))
    await client.connect()
    try:
        output = await client.send_event(nostr_sdk.Event.from_json(ev.to_json()))
        assert output.success, output.failed
    finally:
        await client.disconnect()


class AckingVoidRelay(ScriptedRelay):
    """Says ``OK true`` to every EVENT and serves nothing (EOSE at once to every REQ): a relay that
    acknowledges and keeps nothing."""

    def __init__(self) -> None:
        super().__init__(self._script)
        self.acknowledged: list[str] = []

    async def _script(self, conn: ScriptedConnection) -> None:
        while True:
            msg = await conn.recv()
            if msg and msg[0] == "EVENT" and len(msg) > 1 and isinstance(msg[1], dict):
                self.acknowledged.append(str(msg[1].get("id")))
                await conn.send(RelayOk(str(msg[1].get("id")), True, ""))
            elif msg and msg[0] == "REQ" and len(msg) > 1:
                await conn.send(RelayEose(str(msg[1])))
