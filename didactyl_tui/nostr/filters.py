"""NIP-01 filters: validation and matching (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import NostrError
from .event import Event

Filter = dict[str, Any]
_TAG_KEY = re.compile(r"^#[A-Za-z]$")
_LIST_KEYS = ("ids", "authors", "kinds")
_INT_KEYS = ("since", "until", "limit")


def validate_filter(f: Any) -> Filter:
    """Check a filter's shape; returns it unchanged. Raises :class:`NostrError` naming the key."""
    if not isinstance(f, Mapping):
        raise NostrError("a filter must be a JSON object")
    for key, value in f.items():
        if key in ("ids", "authors"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise NostrError(f"filter {key!r} must be a list of hex strings")
        elif key == "kinds":
            if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            ):
                raise NostrError("filter 'kinds' must be a list of integers")
        elif key in _INT_KEYS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise NostrError(f"filter {key!r} must be a non-negative integer")
        elif _TAG_KEY.match(key):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise NostrError(f"filter {key!r} must be a list of strings")
        elif key == "search":
            if not isinstance(value, str):
                raise NostrError("filter 'search' must be a string")
        else:
            raise NostrError(f"unknown filter key {key!r}")
    return dict(f)


def matches(f: Mapping[str, Any], ev: Event) -> bool:
    """Does ``ev`` match filter ``f``? (``limit`` and ``search`` do not affect matching.)

    ``ids``/``authors`` match exactly (NIP-01 current text: full 64-char values).
    """
    ids = f.get("ids")
    if ids is not None and ev.id not in ids:
        return False
    authors = f.get("authors")
    if authors is not None and ev.pubkey not in authors:
        return False
    kinds = f.get("kinds")
    if kinds is not None and ev.kind not in kinds:
        return False
    since = f.get("since")
    if since is not None and ev.created_at < since:
        return False
    until = f.get("until")
    if until is not None and ev.created_at > until:
        return False
    for key, wanted in f.items():
        if len(key) == 2 and key[0] == "#":
            name = key[1]
            values = {t[1] for t in ev.tags if len(t) >= 2 and t[0] == name}
            if not values.intersection(wanted):
                return False
    return True


def matches_any(filters: Sequence[Mapping[str, Any]], ev: Event) -> bool:
    return any(matches(f, ev) for f in filters)
