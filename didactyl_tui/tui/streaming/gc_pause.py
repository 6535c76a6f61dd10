"""Full garbage collections put off while a reply streams, and done when the keyboard is quiet.

A full (generation 2) collection walks every tracked object the process holds: litellm's, and the widgets of
a long reply (a 10,000-token reply is ~2,600 widgets, ~330k objects). It runs on the UI loop whenever enough
objects survived younger collections, which a growing reply makes happen about once a second, and each one
stalls the stream and the keyboard for 150–350 ms (measured: ~9 per 10,000-token reply, 1.5–1.9 s in all).
While a reply streams only the young generations are collected (they catch the short-lived cycles, in a few
milliseconds). When the turn ends, the collection put off is done once no key has been typed for
``RESUME_IDLE_S`` (at most ``RESUME_MAX_S`` later), so it does not land on the keystrokes that follow a reply.
Textual pauses the collector the same way for smooth scrolling (``App.PAUSE_GC_ON_SCROLL``). A pause lasts one
turn and a turn is bounded in time and size (``[llm] turn_timeout_s``, ``max_reply_chars``).

A chat cleared (a new chat, another resumed) leaves its widgets as cyclic garbage: :func:`collect_when_quiet` collects
it the same way, when the keyboard is quiet (or at the end of a turn that starts first), instead of keeping it beside
the next reply's widgets. After each such collection the memory freed goes back to the system (``malloc_trim``:
Python returns its own arenas, not what the C library keeps), so the app does not stay at its highest (#34).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

NEVER = 1 << 30  # a generation-2 threshold no count of generation-1 collections reaches
RESUME_IDLE_S = 0.3  # after a turn, the put-off collection waits for the keyboard to be quiet this long
RESUME_MAX_S = 5.0  # and never longer than this after the turn
CHECK_S = 0.1  # how often the quiet keyboard is checked for

_depth = 0
_saved_threshold: tuple[int, int, int] | None = None


def paused() -> bool:
    return _saved_threshold is not None


@contextmanager
def full_collections_paused() -> Iterator[None]:
    """Within this block (nestable; in a running event loop) the cyclic collector collects only generations 0
    and 1; full collections resume (with one collection) when the keyboard is next quiet."""
    global _depth, _saved_threshold
    if _saved_threshold is None:
        _saved_threshold = gc.get_threshold()
        gc.set_threshold(_saved_threshold[0], _saved_threshold[1], NEVER)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:  # not at once: the turn's last frame goes out first
            loop = asyncio.get_running_loop()
            loop.call_later(CHECK_S, _resume_when_quiet, loop, time.monotonic() + RESUME_MAX_S)


def _resume_when_quiet(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    if _depth > 0 or _saved_threshold is None:
        return  # another turn paused again (it resumes when it ends), or already resumed
    if _typing(loop, deadline, _resume_when_quiet):
        return
    resume_now()


def _typing(loop: asyncio.AbstractEventLoop, deadline: float, again: Callable[..., None]) -> bool:
    """Whether keys came in the last ``RESUME_IDLE_S`` (then ``again`` is asked for once more, until ``deadline``)."""
    from .typing_clock import seconds_since_input

    if seconds_since_input() < RESUME_IDLE_S and time.monotonic() < deadline:
        loop.call_later(CHECK_S, again, loop, deadline)
        return True
    return False


def collect_when_quiet() -> None:
    """Much garbage was just made (a chat cleared): one full collection when the keyboard is next quiet (at most
    ``RESUME_MAX_S`` later), its memory handed back; a turn that starts first does it when it ends. In a running
    event loop."""
    if _saved_threshold is not None:
        return  # a turn holds full collections: its end collects
    loop = asyncio.get_running_loop()
    loop.call_later(CHECK_S, _collect_when_quiet, loop, time.monotonic() + RESUME_MAX_S)


def _collect_when_quiet(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    if _saved_threshold is not None or _typing(loop, deadline, _collect_when_quiet):
        return  # a turn started (it collects when it ends), or keys are coming
    _collect()


def _collect() -> None:
    from ...freed_memory import release_freed_memory

    _forget_removed_widgets_styles()
    gc.collect()
    release_freed_memory()


def _forget_removed_widgets_styles() -> None:
    """Let go of the rendered lines of widgets already removed. Textual 8.2 caches ``StylesCache.get_inner_outer``
    with an ``lru_cache`` on the method, so each entry keeps its widget's ``StylesCache`` (the widget's last
    rendered lines) for as long as 1,024 newer entries have not pushed it out (Textualize/textual#6665): ~107 of a
    cleared chat's caches a 10,000-token reply, ~1.5 MiB, and what a full cache holds lives as long as the app. The
    entries of live widgets are two styles each, computed again at their next render. Read by name: a Textual
    without the cache (fixed) has nothing to clear."""
    from textual._styles_cache import StylesCache

    clear = getattr(StylesCache.get_inner_outer, "cache_clear", None)
    if callable(clear):
        clear()


def resume_now(*, collect: bool = True) -> None:
    """Restore the collector's thresholds and do the full collection that was put off (``collect``; an app
    that stops with a resume still pending only restores them: its loop will not run the resume)."""
    global _saved_threshold
    if _saved_threshold is None:
        return
    gc.set_threshold(*_saved_threshold)
    _saved_threshold = None
    if collect:
        _collect()
