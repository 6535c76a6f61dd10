"""NIP-01 replacement rules: which event is the current one for a replaceable/addressable address.

Newest ``created_at`` wins; on a tie the lowest id (lexical order) wins. We never trust a relay to
have applied this already.
"""

from __future__ import annotations

from collections.abc import Iterable

from .event import Event
from .kinds import is_addressable, is_replaceable

Address = tuple[int, str, str]  # (kind, pubkey, d) — d is "" for replaceable kinds


def address_of(ev: Event) -> Address | None:
    """The replacement address of ``ev``, or ``None`` for regular and ephemeral events."""
    if is_replaceable(ev.kind):
        return (ev.kind, ev.pubkey, "")
    if is_addressable(ev.kind):
        return (ev.kind, ev.pubkey, ev.d_tag)
    return None


def is_newer(a: Event, b: Event) -> bool:
    """True when ``a`` supersedes ``b`` under NIP-01 (newer, or same second and lower id)."""
    if a.created_at != b.created_at:
        return a.created_at > b.created_at
    return a.id < b.id


def newest(events: Iterable[Event]) -> Event | None:
    best: Event | None = None
    for ev in events:
        if best is None or is_newer(ev, best):
            best = ev
    return best


def latest_by_address(events: Iterable[Event]) -> dict[Address, Event]:
    """Collapse replaceable/addressable events to the current one per address (others dropped)."""
    out: dict[Address, Event] = {}
    for ev in events:
        addr = address_of(ev)
        if addr is None:
            continue
        cur = out.get(addr)
        if cur is None or is_newer(ev, cur):
            out[addr] = ev
    return out


def resolve(events: Iterable[Event]) -> list[Event]:
    """Dedupe by id and keep only the current version of every replaceable/addressable address.

    Regular events pass through. Result is newest first (ties: lowest id first).
    """
    seen: dict[str, Event] = {}
    for ev in events:
        seen.setdefault(ev.id, ev)
    regular = [ev for ev in seen.values() if address_of(ev) is None]
    current = list(latest_by_address(seen.values()).values())
    out = regular + current
    out.sort(key=lambda e: (-e.created_at, e.id))
    return out
