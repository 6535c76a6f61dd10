"""Versions, bases and conflicts: is a newer version a later edit of ours, or a concurrent one?

Every memory version we sign names its base, ``["prev", <event id>]`` (the version the store held when the
edit was saved). When a newer version ``V`` replaces our own latest save ``L``:

- ``V``'s base chain (``prev``, then that version's ``prev``, ... through the versions this device has kept)
  reaches ``L``: a normal later edit (quiet);
- the chain reaches a version older than ``L``: ``V`` was edited from an older version, not from ``L``: a
  concurrent edit (``L`` lost: the user is told);
- ``V`` has no ``prev`` tag (another Nostr client), or the chain reaches a version this device never saw:
  judged by what this device has seen — if ``L`` had been acknowledged or served by a relay before ``V``
  arrived, another writer could have read it: a later edit; otherwise ``V`` cannot have been based on
  ``L``: a concurrent edit.

Pure apart from the history it reads (call it on the history thread). See docs/sync.md.
"""

from __future__ import annotations

from enum import Enum

from ...nostr.event import Event
from ...nostr.replaceable import is_newer
from .history import MemoryHistory
from .store import PREV_TAG

MAX_CHAIN = 256  # versions walked back at most (a longer chain is judged like an untagged version)


class Relation(str, Enum):
    LATER_EDIT = "later_edit"  # built on ours (or on a version built on ours)
    CONCURRENT = "concurrent"  # edited from an older version than ours: ours lost


def base_of(ev: Event) -> str | None:
    """The ``prev`` tag's event id, or None (untagged: another client, or a version from before the tag)."""
    for tag in ev.tags:
        if len(tag) >= 2 and tag[0] == PREV_TAG and isinstance(tag[1], str) and len(tag[1]) == 64:
            return tag[1].lower()
    return None


def relation(history: MemoryHistory, newer: Event, ours: Event) -> Relation:
    """How ``newer`` (a version newer than ``ours``, this device's latest save) relates to ``ours``."""
    current = newer
    for _ in range(MAX_CHAIN):
        base = base_of(current)
        if base is None and current is not newer:
            return Relation.LATER_EDIT  # a version newer than ours, adopted quietly when it arrived
        if base is None:
            break
        if base == ours.id:
            return Relation.LATER_EDIT
        known = history.get(base)
        if known is None:
            break  # a version this device never saw: judged by what it has seen
        if not is_newer(known.event, ours):
            return Relation.CONCURRENT  # edited from a version older than ours
        current = known.event
    return Relation.LATER_EDIT if history.delivered_at(ours.id) is not None else Relation.CONCURRENT
