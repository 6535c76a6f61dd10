"""A stranger's flood of NIP-17 gift wraps for the attach tests: wraps addressed to someone, each sealed by its own
throwaway key and wrapped by another (what anyone may publish to a relay that takes wraps for that key).

Made with the pure NIP-59 functions (no thread hop, no signer): about 0.2 ms a wrap here, so 1,000 cost ~0.2 s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from relay_servers import fast_client_kwargs

from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip17 import make_message
from didactyl_tui.nostr.nip59 import wrap
from didactyl_tui.nostr.pool import RelayPool

SPAM_TEXT = "spam from a stranger"


def spam_wraps(recipient: str, count: int, *, created_at: int, spread_s: int = 0) -> list[Event]:
    """``count`` kind 14 messages to ``recipient`` from as many throwaway keys, gift-wrapped; the rumor, seal and wrap
    dated ``created_at`` (plus ``i % spread_s`` seconds for the i-th when ``spread_s``: a flood over some seconds)."""
    wraps = []
    for i in range(count):
        at = created_at + (i % spread_s if spread_s else 0)
        stranger = SecretKey.generate()
        rumor = make_message(stranger.public_key_hex, [recipient], f"{SPAM_TEXT} #{i}", created_at=at)
        wraps.append(wrap(rumor, stranger, recipient, wrapper_key=SecretKey.generate(), seal_created_at=at,
                          wrap_created_at=at))
    return wraps


async def publish_all(url: str, wraps: Sequence[Event], *, connections: int = 4, timeout: float = 30.0) -> None:
    """Publish ``wraps`` pipelined over ``connections`` connections (each keeps within a relay's per-connection
    burst), in order on each; fails unless the relay took every one."""
    pools = [RelayPool([url], **fast_client_kwargs()) for _ in range(connections)]
    try:
        for pool in pools:
            await pool.start()
            assert await pool.wait_connected(timeout), f"cannot connect to {url}"
        shares = [list(wraps[i::connections]) for i in range(connections)]
        outcomes = await asyncio.gather(*(pool.publish(w, timeout) for pool, share in zip(pools, shares, strict=True)
                                          for w in share))
        refused = [o.summary() for o in outcomes if not o.any_accepted]
        assert not refused, f"{len(refused)} wraps refused, e.g. {refused[0]}"
    finally:
        for pool in pools:
            await pool.close()
