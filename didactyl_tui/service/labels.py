"""How the views label times and events: the one place of that formatting (light: the first frame may use it)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

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


_CONTROL = str.maketrans({c: None for c in [*range(0x00, 0x20), *range(0x7f, 0xa0)]})
KIND_NAMES = {0: "profile", 3: "contact list", 10002: "relay list"}


def one_line(text: str, limit: int = 200) -> str:
    """Text from outside (a relay, another client) for a terminal line: control characters removed, shortened."""
    clean = text.translate(_CONTROL)
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def drift_lines(drifts: Sequence[Any]) -> list[str]:
    """Identity drift as the views print it: one heading per kind, one line per field."""
    lines = []
    for d in drifts:
        what = KIND_NAMES.get(d.kind, f"kind {d.kind}")
        lines.append(f"{what}: the relays hold {version_label(d.event.id, d.event.created_at)}, published elsewhere")
        for c in d.changes:
            relays = f'"{one_line(c.relays, 60)}"' if c.relays else "(absent)"
            config = f'"{one_line(c.config, 60)}"' if c.config else "(absent)"
            lines.append(f"  {one_line(c.field, 40)}: relays {relays} · config {config}")
    return lines
