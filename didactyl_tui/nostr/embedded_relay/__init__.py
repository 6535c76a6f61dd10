"""The embedded loopback relay: websockets server (``server``) over a SQLite store (``store``).

One relay per data dir, shared by every didactyl process: ``shared.ensure_shared_relay`` finds it or
starts it as its own process (``process``, ``python -m didactyl_tui.nostr.embedded_relay``).
"""

from .server import EmbeddedRelay, serve_forever
from .shared import SharedRelay, ensure_shared_relay, find_shared_relay, stop_shared_relay

__all__ = ["EmbeddedRelay", "SharedRelay", "ensure_shared_relay", "find_shared_relay", "serve_forever",
           "stop_shared_relay"]
