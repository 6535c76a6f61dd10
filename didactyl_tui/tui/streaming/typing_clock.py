"""When a key was last typed in the message box: a streaming reply paints less often while someone types
(``fast.py``), and the garbage collection put off by a turn waits for a pause in the typing (``gc_pause.py``)."""

from __future__ import annotations

import time

TYPING_RECENT_S = 1.0  # a key this recent: someone is typing
_last_input = float("-inf")


def note_input() -> None:
    """A key was typed."""
    global _last_input
    _last_input = time.monotonic()


def seconds_since_input() -> float:
    """Seconds since the last key (infinite before the first)."""
    return time.monotonic() - _last_input


def typing_now() -> bool:
    """Whether someone is typing (a key within ``TYPING_RECENT_S``)."""
    return seconds_since_input() < TYPING_RECENT_S
