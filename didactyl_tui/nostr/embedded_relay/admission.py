"""Who may open a websocket to the embedded relay: no web page, and no more connections than the limits.

Checked in the HTTP upgrade request, before the handshake completes: a refusal is an HTTP status
(403 cross-origin, 503 full) and the socket is closed at once, never held through a close handshake.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from urllib.parse import urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.protocol import State

from .peer import Peer

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
EVICTABLE_AFTER_S = 1.0  # a connection silent this long, with no subscription, may make room for a new one


def is_loopback_origin(origin: str) -> bool:
    """True for an ``Origin`` naming a loopback host (a page served from this machine)."""
    try:
        host = (urlsplit(origin.strip()).hostname or "").lower()
    except ValueError:
        return False
    return host in LOOPBACK_HOSTS


def remote_ip(connection: ServerConnection) -> str:
    address = connection.remote_address
    return str(address[0]) if isinstance(address, tuple) and address else "?"


class ConnectionGate:
    """Counts connections (open ones and handshakes under way) against the total and per-IP limits."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self._admitted: set[ServerConnection] = set()  # handshakes accepted, not yet handled

    def admit(self, connection: ServerConnection, peers: Iterable[Peer]) -> bool:
        """Whether ``connection`` may open, evicting a silent, subscription-less peer if that makes room."""
        ip = remote_ip(connection)
        self._admitted = {c for c in self._admitted if c.state is State.CONNECTING}
        pending_ip = sum(1 for c in self._admitted if remote_ip(c) == ip)
        live = [p for p in peers if not p.closing]
        same_ip = [p for p in live if p.ip == ip]
        ip_full = len(same_ip) + pending_ip >= self.max_per_ip
        if not ip_full and len(live) + len(self._admitted) < self.max_connections:
            self._admitted.add(connection)
            return True
        now = time.monotonic()
        idle = [p for p in (same_ip if ip_full else live)
                if not p.subs and not p.pending_writes and now - p.last_active >= EVICTABLE_AFTER_S]
        if not idle:
            return False
        min(idle, key=lambda p: p.last_active).drop("idle connection evicted to make room")
        self._admitted.add(connection)
        return True

    def opened(self, connection: ServerConnection) -> None:
        """The handshake completed: the connection now counts as a peer."""
        self._admitted.discard(connection)
