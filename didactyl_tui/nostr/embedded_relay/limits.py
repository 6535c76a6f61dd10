"""Every bound the embedded relay enforces, in one frozen value, and the small meters that apply them.

The user-facing documentation of each limit lives in ``didactyl_tui/config.py`` ([relays.embedded]),
which builds a :class:`RelayLimits` from the config; a test keeps the names and defaults in step.
Shaped after strfry's ``relay.limits`` and nostr-rs-relay's ``[limits]``.
"""

from __future__ import annotations

import dataclasses
import resource
import time
from collections import OrderedDict
from dataclasses import dataclass

MiB = 1024 * 1024
FD_RESERVE = 64  # descriptors kept for the database, its WAL, the listening socket and logs
# A relay process with no client for this long exits (process.py); [relays] embedded_idle_exit_s in the app.
DEFAULT_IDLE_EXIT_S = 300.0


@dataclass(frozen=True, slots=True)
class RelayLimits:
    max_connections: int = 512
    max_connections_per_ip: int = 256
    max_frame_bytes: int = 512 * 1024
    max_subscriptions: int = 32
    max_filters: int = 16
    max_filter_values: int = 1000
    max_values_per_connection: int = 4000
    max_filters_total: int = 4096
    max_limit: int = 5000
    max_result_bytes: int = 32 * MiB
    max_output_bytes: int = 1 * MiB
    max_output_bytes_total: int = 64 * MiB
    slow_client_timeout_s: float = 10.0
    max_pending_events: int = 256
    events_per_second: float = 200.0
    events_burst: int = 1000
    bytes_per_minute: int = 64 * MiB
    author_events_per_second: float = 200.0
    author_bytes_per_minute: int = 64 * MiB
    max_db_bytes: int = 1024 * MiB
    max_wal_bytes: int = 64 * MiB
    stranger_share: float = 0.75
    idle_timeout_s: float = 600.0

    def replace(self, **changes: object) -> RelayLimits:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def raise_fd_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(wanted: int) -> int:
    """``wanted`` connections, or fewer when the descriptor limit cannot hold them."""
    return max(1, min(wanted, raise_fd_limit() - FD_RESERVE))


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst``; ``take`` answers whether ``cost`` fit."""

    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp = time.monotonic()

    def take(self, cost: float = 1.0, now: float | None = None) -> bool:
        if self.rate <= 0:
            return True  # 0 disables the limit
        now = time.monotonic() if now is None else now
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < cost:
            return False
        self.tokens -= cost
        return True


class Meter:
    """An events/s bucket and a bytes/minute bucket, charged together."""

    __slots__ = ("events", "bytes")

    def __init__(self, events_per_second: float, burst: int, bytes_per_minute: int) -> None:
        self.events = TokenBucket(events_per_second, max(burst, 1))
        self.bytes = TokenBucket(bytes_per_minute / 60.0, bytes_per_minute)

    def charge(self, size: int) -> str | None:
        """None when allowed, else the reason (the caller prefixes ``rate-limited:``)."""
        if not self.events.take(1):
            return f"more than {self.events.rate:g} events per second"
        if not self.bytes.take(size):
            return f"more than {int(self.bytes.burst)} bytes per minute"
        return None


class AuthorMeters:
    """Per-author meters, at most ``capacity`` of them (least recently used forgotten first)."""

    def __init__(self, limits: RelayLimits, capacity: int = 10_000) -> None:
        self.limits = limits
        self.capacity = capacity
        self._meters: OrderedDict[str, Meter] = OrderedDict()

    def charge(self, pubkey: str, size: int) -> str | None:
        meter = self._meters.get(pubkey)
        if meter is None:
            lim = self.limits
            meter = Meter(lim.author_events_per_second, lim.events_burst, lim.author_bytes_per_minute)
            self._meters[pubkey] = meter
            if len(self._meters) > self.capacity:
                self._meters.popitem(last=False)
        else:
            self._meters.move_to_end(pubkey)
        return meter.charge(size)
