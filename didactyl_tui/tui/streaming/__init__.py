"""The reply view: how a message's markdown is shown and a streaming reply painted, behind one small interface.

Two paths inside:

- **fast** (``fast.py`` and the modules it uses): our own streaming. Finished blocks are handed to the Markdown
  whole, the growing block is plain text, a long reply is split into parts that fold away from the view, the
  screen runs one layout pass per paint and paints a key's echo before it, and full garbage collections wait
  for the end of a turn. It reads and overrides Textual's private state: this package is the only code of the
  project allowed to (tests/tui/streaming/test_textual_internals.py), and it runs only on the Textual versions it
  is tested on (``textual_range.py``).
- **public** (``public.py``): Textual's documented ``Markdown`` and ``MarkdownStream`` (``Markdown.get_stream``).
  Used when ``[ui] fast_streaming = false``, and on a Textual outside the tested range (said once in the log).

The same tests run against both (tests/tui/test_tui_render.py); bench/stream_bench.py measures both against raw
litellm. What the rest of the TUI uses:

- :func:`choose_path` — which path (a ``reply.ReplyPath``), once per conversation;
- :func:`new_body` — the body of one message (a ``reply.ReplyBody``) inside its entry widget (a ``reply.ReplyHost``);
- :data:`ScreenHooks` — a mixin for the screen that shows the conversation (a base before ``Screen``);
- :func:`turn_running`, :func:`note_input`, :func:`app_stopped` — the turn's garbage-collection pause.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from . import textual_range
from .reply import ReplyBody, ReplyHost, ReplyPath

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

log = logging.getLogger("didactyl.tui.streaming")


_untested_said = False


def fast_path_supported() -> bool:
    """Whether the installed Textual is one the fast path is tested on."""
    return textual_range.is_tested(textual_range.installed())


def choose_path(fast: bool = True) -> ReplyPath:
    """The fast path when asked for (``[ui] fast_streaming``) and the installed Textual is tested; else the
    public one. An untested Textual is logged once per process."""
    global _untested_said
    if not fast:
        return ReplyPath.PUBLIC
    if fast_path_supported():
        return ReplyPath.FAST
    if not _untested_said:
        _untested_said = True
        log.warning("Textual %s is outside the range the fast streaming path is tested on (%s): replies stream "
                    "through Textual's public MarkdownStream", textual_range.installed(), textual_range.PIN)
    return ReplyPath.PUBLIC


def new_body(path: ReplyPath, host: ReplyHost, *, streaming: bool,
             parser_factory: Callable[[], MarkdownIt] | None = None) -> ReplyBody:
    if path is ReplyPath.FAST:
        from .fast import FastBody

        return FastBody(host, streaming=streaming, parser_factory=parser_factory)
    from .public import PublicBody

    return PublicBody(host, streaming=streaming, parser_factory=parser_factory)


def hooks_for(supported: bool) -> type:
    """The screen's mixin: the fast path's hooks on a tested Textual; on any other, one that overrides nothing."""
    from .screen_hooks import FastScreenHooks, PublicScreenHooks

    return FastScreenHooks if supported else PublicScreenHooks


# Chosen once, when the screen's class is made: on an untested Textual nothing of Textual's is overridden at all
# (a conversation on the public path leaves the fast hooks idle).
if TYPE_CHECKING:  # the checker reads the screen with the fast hooks (the public ones add nothing)
    from .screen_hooks import FastScreenHooks as ScreenHooks
else:
    ScreenHooks = hooks_for(fast_path_supported())


def turn_running(path: ReplyPath) -> AbstractContextManager[None]:
    """Around one turn: on the fast path, full garbage collections wait until it ends (``gc_pause.py``)."""
    if path is not ReplyPath.FAST:
        return nullcontext()
    from .gc_pause import full_collections_paused

    return full_collections_paused()


def note_input() -> None:
    """A key was typed (a collection put off by a turn waits until typing pauses)."""
    from .typing_clock import note_input as note

    note()


def chat_cleared() -> None:
    """A chat's widgets were removed: their garbage is collected (and its memory handed back) when the keyboard is
    next quiet, on either path (``gc_pause.collect_when_quiet``)."""
    from .gc_pause import collect_when_quiet

    collect_when_quiet()


def app_stopped() -> None:
    """The app is stopping: a collection still put off restores the collector without running."""
    from .gc_pause import resume_now

    resume_now(collect=False)


__all__ = ["ScreenHooks", "app_stopped", "chat_cleared", "choose_path",
           "fast_path_supported", "hooks_for", "new_body", "note_input", "turn_running"]
