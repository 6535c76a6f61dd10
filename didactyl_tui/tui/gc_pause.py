"""Full garbage collections put off while a reply streams.

A full (generation 2) collection walks every tracked object the process holds: litellm's, and the widgets of
a long reply (a 10,000-token reply is ~2,600 widgets, ~330k objects). It runs on the UI loop whenever enough
objects survived younger collections, which a growing reply makes happen about once a second, and each one
stalls the stream and the keyboard for 150–350 ms (measured: ~9 per 10,000-token reply, 1.5–1.9 s in all).
While a reply streams only the young generations are collected (they catch the short-lived cycles, in a few
milliseconds); full collections resume when the turn ends. Textual does the same for smooth scrolling
(``App.PAUSE_GC_ON_SCROLL``). The pause lasts one turn at most, and a turn is bounded in time and size
(``[llm] turn_timeout_s``, ``max_reply_chars``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

NEVER = 1 << 30  # a generation-2 threshold no count of generation-1 collections reaches

_depth = 0
_saved_threshold: tuple[int, int, int] | None = None


@contextmanager
def full_collections_paused() -> Iterator[None]:
    """Within this block (nestable), the cyclic collector collects only generations 0 and 1."""
    global _depth, _saved_threshold
    if _depth == 0:
        _saved_threshold = gc.get_threshold()
        gc.set_threshold(_saved_threshold[0], _saved_threshold[1], NEVER)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _saved_threshold is not None:
            gc.set_threshold(*_saved_threshold)
            _saved_threshold = None
