"""NIP-01 replacement rules: the only copy of "which version is newer" and "what is an address".

Newest ``created_at`` wins; on a tie the lowest id (lexical order) wins. We never trust a relay to
have applied this already. Everything else in the code base (the outbox, memory history, the
identity cache, the relay client's query results) calls these functions instead of comparing
``created_at``/``id`` itself.
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


def address_text(kind: int, pubkey: str, d: str = "") -> str:
    """The NIP-01 ``kind:pubkey:d`` form of an address (NIP-33 ``a`` tag value)."""
    return f"{kind}:{pubkey}:{d}"


def address_key(ev: Event) -> str:
    """``kind:pubkey:d`` for replaceable/addressable events, ``event:<id>`` for the others.

    One string per "thing that can be replaced": the key the outbox, the publisher and the
    embedded relay store versions under.
    """
    addr = address_of(ev)
    if addr is None:
        return f"event:{ev.id}"
    return address_text(*addr)


def is_newer_version(created_at: int, event_id: str, other_created_at: int, other_id: str) -> bool:
    """NIP-01 order on ``(created_at, id)`` pairs: newer, or the same second and a lower id.

    For callers that hold the pair without the event (SQLite rows, per-relay notes).
    """
    if created_at != other_created_at:
        return created_at > other_created_at
    return event_id < other_id


def is_newer(a: Event, b: Event) -> bool:
    """True when ``a`` supersedes ``b`` under NIP-01 (newer, or same second and lower id)."""
    return is_newer_version(a.created_at, a.id, b.created_at, b.id)


def newest_first(ev: Event) -> tuple[int, str]:
    """Sort key putting the current version first: ``sorted(events, key=newest_first)``."""
    return (-ev.created_at, ev.id)


def sql_newest_first(created_at_column: str = "created_at", id_column: str = "id") -> str:
    """The same order as :func:`newest_first`, as an SQL ``ORDER BY`` clause body."""
    return f"{created_at_column} DESC, {id_column} ASC"


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
    return sorted(regular + current, key=newest_first)
