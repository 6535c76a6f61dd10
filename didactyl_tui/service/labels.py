"""How the views label times and events: the one place of that formatting (light: the first frame may use it)."""

from __future__ import annotations

import time

SECONDS = "%Y-%m-%d %H:%M:%S"
MINUTES = "%Y-%m-%d %H:%M"
CLOCK = "%H:%M:%S"


def when(created_at: int | float | None, fmt: str = SECONDS) -> str:
    """A timestamp in local time ("-" when unknown)."""
    if created_at is None:
        return "-"
    return time.strftime(fmt, time.localtime(created_at))


def short_id(event_id: str) -> str:
    """An event id as the views show it: its first 8 hex digits."""
    return event_id[:8]


def version_label(event_id: str | None, created_at: int | float | None) -> str:
    """``event 1a2b3c4d of 2026-01-02 03:04:05``, or that nothing was published yet."""
    if event_id is None:
        return "nothing published yet"
    return f"event {short_id(event_id)} of {when(created_at or 0)}"
