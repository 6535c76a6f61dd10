"""Helpers for the memory tests against real relays: what a relay stores, and another device's publish."""

from __future__ import annotations

from typing import Any

from agent_support import AGENT_KEY
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs

from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool


def text_of(ev: Any, key: SecretKey = AGENT_KEY) -> str:
    """The plaintext of one of ``key``'s memory versions."""
    conv = nip44.get_conversation_key(key.secret_hex(), key.public_key_hex)
    return nip44.decrypt(ev.content, conv) if ev.content else ""


async def held(relay: EmbeddedRelayUnderTest, d: str = "short_term_memory", key: SecretKey = AGENT_KEY) -> list[Any]:
    """What the relay stores of ``key``'s memory ``d`` (read from its own database, not through the app)."""
    assert relay.relay is not None
    return await relay.relay.query([{"authors": [key.public_key_hex], "kinds": [30078], "#d": [d]}])


async def put(url: str, *events: Any) -> None:
    """Publish straight to one relay, as another device would."""
    pool = RelayPool([url], **fast_client_kwargs())
    await pool.start()
    try:
        await pool.wait_connected(5.0)
        for ev in events:
            assert (await pool.publish(ev, timeout=3.0)).any_accepted
    finally:
        await pool.close()
