"""The agent's kind 10050 (NIP-17): where it reads gift wraps, published when the relays' copy differs."""

from __future__ import annotations

from collections.abc import Callable

from ..agent.dm.signer import DmSigner
from ..config import Config
from ..nostr.nip17 import dm_relay_list_filter, dm_relays_of
from ..nostr.pool import RelayPool


async def publish_dm_relay_list(pool: RelayPool, signer: DmSigner, config: Config, clock: Callable[[], float],
                                warn: Callable[[str], None]) -> None:
    """Our kind 10050 (the relays in use), when the relays' copy differs. Not while ``$DIDACTYL_RELAYS`` overrides
    the relays: they are this run's, not where the agent reads from for good."""
    timeout, me = config.relays.timeout_s, signer.public_key_hex
    if not pool.urls or config.relays_override is not None:
        return
    current = [ev for ev in await pool.query([dm_relay_list_filter([me])], timeout=timeout) if ev.pubkey == me]
    wanted = pool.urls[:8]
    if current and dm_relays_of(current[0]) == wanted:
        return
    created_at = max(int(clock()), current[0].created_at + 1 if current else 0)
    event = await signer.dm_relay_list(wanted, created_at=created_at)
    outcome = await pool.publish(event, timeout)
    if outcome.results and not outcome.any_accepted:
        warn(f"the agent's DM relay list was not published: {outcome.summary()}")
