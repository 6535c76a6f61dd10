"""The relay's side of filters: range and complexity checks, and filters compiled for fast live matching.

``nostr.filters`` checks a filter's shape and is the reference for matching; here the relay adds what
a server must refuse (integers SQLite cannot hold, too many values, NIP-50 search) and compiles each
accepted filter into sets, so matching a published event against every open subscription costs a few
set lookups per filter, whatever the number of values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import NostrError
from ..event import Event
from ..filters import Filter, validate_filter

INT64_LIMIT = 2**63  # SQLite integers are signed 64-bit
MAX_KIND = 65535


def check_filter(raw: Any, max_values: int) -> Filter:
    """A filter this relay can run, or :class:`NostrError` saying why not (no ``invalid:`` prefix)."""
    f = validate_filter(raw)
    if "search" in f:
        raise NostrError("this relay does not support NIP-50 search")
    for key, value in f.items():
        if isinstance(value, list) and len(value) > max_values:
            raise NostrError(f"filter {key!r} has more than {max_values} values")
        if key in ("since", "until", "limit") and value >= INT64_LIMIT:
            raise NostrError(f"filter {key!r} must be below 2^63")
    if any(not 0 <= k <= MAX_KIND for k in f.get("kinds", ())):
        raise NostrError(f"filter 'kinds' values must be integers in 0..{MAX_KIND}")
    return f


def filter_cost(f: Mapping[str, Any]) -> int:
    """What a filter weighs against a connection's budget: one, plus one per listed value."""
    return 1 + sum(len(v) for v in f.values() if isinstance(v, list))


@dataclass(frozen=True, slots=True)
class CompiledFilter:
    ids: frozenset[str] | None
    authors: frozenset[str] | None
    kinds: frozenset[int] | None
    since: int | None
    until: int | None
    tags: tuple[tuple[str, frozenset[str]], ...]

    @classmethod
    def of(cls, f: Mapping[str, Any]) -> CompiledFilter:
        def as_set(key: str) -> frozenset[Any] | None:
            values = f.get(key)
            return None if values is None else frozenset(values)

        tags = tuple((k[1], frozenset(v)) for k, v in f.items() if len(k) == 2 and k[0] == "#")
        return cls(as_set("ids"), as_set("authors"), as_set("kinds"), f.get("since"), f.get("until"), tags)

    def matches(self, ev: Event, tag_index: dict[str, set[str]]) -> bool:
        """Same answer as ``nostr.filters.matches``; ``tag_index`` is :func:`tag_index` of ``ev``."""
        if self.ids is not None and ev.id not in self.ids:
            return False
        if self.authors is not None and ev.pubkey not in self.authors:
            return False
        if self.kinds is not None and ev.kind not in self.kinds:
            return False
        if self.since is not None and ev.created_at < self.since:
            return False
        if self.until is not None and ev.created_at > self.until:
            return False
        for name, wanted in self.tags:
            values = tag_index.get(name)
            if not values or wanted.isdisjoint(values):
                return False
        return True


def tag_index(ev: Event) -> dict[str, set[str]]:
    """Tag name -> first values, built once per published event for all subscriptions."""
    index: dict[str, set[str]] = {}
    for t in ev.tags:
        if len(t) >= 2:
            index.setdefault(t[0], set()).add(t[1])
    return index


@dataclass(slots=True)
class Subscription:
    filters: tuple[CompiledFilter, ...]
    cost: int

    def matches(self, ev: Event, index: dict[str, set[str]]) -> bool:
        return any(f.matches(ev, index) for f in self.filters)
