"""Who hears of what the document store does: changes (a snapshot and its origin), warnings, and every version
seen (before the change listeners hear of it, so the sync can keep a history and judge concurrent edits). A
listener's bug is logged, never raised into the document path."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from .versions import DocumentSnapshot, VersionSeen

log = logging.getLogger("didactyl.documents")

ChangeListener = Callable[[DocumentSnapshot, str], None]  # (snapshot, origin "local" | "remote")
WarningListener = Callable[[str], None]
VersionListener = Callable[[VersionSeen], None]
MAX_WARNINGS = 100  # kept for a late reader; the listeners have them all

T = TypeVar("T")


def _add(callbacks: list[T], cb: T) -> Callable[[], None]:
    callbacks.append(cb)
    return lambda: callbacks.remove(cb) if cb in callbacks else None


class StoreListeners:
    def __init__(self) -> None:
        self._changes: list[ChangeListener] = []
        self._warnings: list[WarningListener] = []
        self._versions: list[VersionListener] = []
        self.warnings: list[str] = []

    def add_change(self, cb: ChangeListener) -> Callable[[], None]:
        return _add(self._changes, cb)

    def add_warning(self, cb: WarningListener) -> Callable[[], None]:
        return _add(self._warnings, cb)

    def add_version(self, cb: VersionListener) -> Callable[[], None]:
        return _add(self._versions, cb)

    def seen(self, seen: VersionSeen) -> None:
        for cb in list(self._versions):
            try:
                cb(seen)
            except Exception:  # a broken listener must not break the document path
                log.exception("document version listener failed")

    def changed(self, snap: DocumentSnapshot, origin: str) -> None:
        for cb in list(self._changes):
            try:
                cb(snap, origin)
            except Exception:  # a broken listener must not break the document path
                log.exception("document change listener failed")

    def warn(self, message: str) -> None:
        log.warning("%s", message)
        self.warnings.append(message)
        del self.warnings[:-MAX_WARNINGS]
        for cb in list(self._warnings):
            try:
                cb(message)
            except Exception:
                log.exception("document warning listener failed")
