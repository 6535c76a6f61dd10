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

from collections.abc import Callable
from enum import Enum

from ...nostr.event import Event
from ...nostr.replaceable import is_newer
from .history import DocumentHistory, DocumentVersion

PREV_TAG = "prev"  # ["prev", <event id>]: the version this one was edited from (docs/sync.md)
MAX_CHAIN = 256  # versions walked back at most (a longer chain is judged like an untagged version)
LOST_NOTE = "lost to a newer version from another device"


class Relation(str, Enum):
    LATER_EDIT = "later_edit"  # built on ours (or on a version built on ours)
    CONCURRENT = "concurrent"  # edited from an older version than ours: ours lost


def base_of(ev: Event) -> str | None:
    """The ``prev`` tag's event id, or None (untagged: another client, or a version from before the tag)."""
    for tag in ev.tags:
        if len(tag) >= 2 and tag[0] == PREV_TAG and isinstance(tag[1], str) and len(tag[1]) == 64:
            return tag[1].lower()
    return None


def relation(history: DocumentHistory, newer: Event, ours: Event) -> Relation:
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


def latest_local(history: DocumentHistory, d: str, author: str, kind: int | None = None) -> DocumentVersion | None:
    """This device's latest save of document ``d`` (of ``kind``) that went out (refused ones never did)."""
    for v in history.versions(d, author, kind):
        if v.origin == "local" and not v.note.startswith("not published"):
            return v
    return None


def lost_local_edit(history: DocumentHistory, author: str, newer: Event, replaced_id: str | None,
                    same_text: Callable[[Event], bool], *, once_recorded: bool = True) -> str | None:
    """The id of this device's latest save of ``newer``'s document when ``newer`` (a version that replaced it)
    is a concurrent edit — annotated as lost in the history; None for a later edit, or nothing of ours.
    ``same_text(ours)``: the other writer wrote the same words (nothing lost). The one rule for memory, soul
    and tasks. Call it before ``newer`` is recorded — or, when the caller keeps track of what it judged itself
    (another part may have recorded ``newer`` first), with ``once_recorded=False``."""
    if once_recorded and history.get(newer.id) is not None:
        return None  # seen before (our own save coming back, or judged when it first arrived)
    ours = latest_local(history, newer.d_tag, author, newer.kind)
    if ours is None or ours.event_id == newer.id or not is_newer(newer, ours.event):
        return None
    if replaced_id is not None and replaced_id != ours.event_id:
        return None  # it replaced another device's version, not our edit (judged when that one arrived)
    if LOST_NOTE in ours.note or relation(history, newer, ours.event) is Relation.LATER_EDIT:
        return None  # told already, or built on ours
    if same_text(ours.event):
        return None
    history.annotate(ours.event_id, LOST_NOTE)
    return ours.event_id
