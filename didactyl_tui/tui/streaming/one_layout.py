"""One layout pass per paint while a reply streams, and a key's echo before it.

After a layout pass Textual hands each widget the size it was just arranged at; a widget whose virtual size
changed (every block a paint mounts: it had none) asks for a layout again, so each paint of a streaming reply
was laid out twice, the second time to the same result (~12 ms over the whole screen each). While a reply
streams, requests raised by the pass itself are dropped; requests made before it, or by anything else after
it, stand. Outside streaming nothing changes (a resumed chat's stubs place entries using the second pass).
The full map the pass arranges is kept, not arranged again by the first region asked for (``full_map.py``).

A layout pass over a streaming screen costs 15–30 ms. When one is due and a widget outside the conversation
(the chat input, after a key) needs painting too while someone types, that widget is painted first on its own — the
pass would not move it — and the pass runs at the next update, one tick later; a key still queued puts the pass off
the same way, a few ticks at most (``keys_before_layout``). With nobody typing, the pass paints it all in one frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.dom import DOMNode
from textual.screen import Screen
from textual.widget import Widget


def layout_once(screen: Screen[Any], run_layout: Callable[[], None]) -> None:
    """Run ``run_layout`` (the screen's layout pass), then forget the layout requests it raised itself.

    This reads Textual's private state (the compositor's widgets, ``_layout_required``), as of Textual 8.2; a
    Textual without it gets the plain pass (slower streaming, nothing wrong).
    """
    compositor = getattr(screen, "_compositor", None)
    widgets = getattr(compositor, "widgets", None)
    if widgets is None or not all(hasattr(widget, "_layout_required") for widget in widgets):
        run_layout()
        return
    waiting = {widget for widget in widgets if widget._layout_required}
    from .full_map import kept

    with kept(compositor):
        run_layout()
    for widget in screen._compositor.widgets:
        if widget._layout_required and widget not in waiting:
            widget._layout_required = False


def keys_before_layout(screen: Screen[Any], conversation: Widget) -> bool:
    """When a layout pass is due: if a key is still queued, put the pass off (the key goes first); if widgets
    outside ``conversation`` need painting (a key's echo), paint only those and leave the pass, and the
    conversation's repaint, for the next update. Returns True if the update is done (the pass put off).

    Private Textual state again (the dirty set, the update timer, the compositor refresh, as of 8.2); without it
    the update runs as Textual's.
    """
    try:
        if not (screen._layout_required and screen.is_current and not screen.app._batch_count):
            return False
        if _input_queued(screen):
            screen._update_timer.pause()
            screen._update_timer.resume()  # next tick, after the key
            return True
        echo = _echo(screen, conversation)
        if not echo or screen in echo or not _someone_typing(screen, echo):
            return False  # nobody waits for an echo: the pass paints it all, in one frame
        screen._update_timer.pause()
        _paint_first(screen, echo)
        screen._update_timer.resume()  # the layout pass: next tick
        return True
    except AttributeError:
        return False


def echo_only(screen: Screen[Any], conversation: Widget) -> bool:
    """While a streaming paint's steps run and a layout pass is due: paint only the widgets outside
    ``conversation`` that are on screen (a key's echo), and leave the pass and the conversation's repaint for
    the update after the steps. Returns True if the update is done so; False (nothing held) if no pass is due.
    Private Textual state as in ``keys_before_layout``."""
    try:
        if not (screen._layout_required and screen.is_current and not screen.app._batch_count):
            return False
        screen._update_timer.pause()
        echo = _echo(screen, conversation)
        if echo and screen not in echo and _someone_typing(screen, echo):
            _paint_first(screen, echo)
        return True
    except AttributeError:
        return False


def _someone_typing(screen: Screen[Any], echo: set[Widget]) -> bool:
    """Whether an echo is waited for: a key typed in the message box lately, or the focused widget among those
    to paint. Otherwise what changed outside the conversation (the footer's keys as a turn starts, the inspector, the
    status bar) goes out with the pass, in one frame, not in a frame of its own first: 12 frames, ~20 ms of the UI
    loop a 1,000-token reply (measured on bench/stream_bench.py, #34)."""
    from .typing_clock import typing_now

    return typing_now() or screen.focused in echo


def _outside(widget: Widget, conversation: DOMNode) -> bool:
    return widget is not conversation and conversation not in widget.ancestors


def _echo(screen: Screen[Any], conversation: DOMNode) -> set[Widget]:
    """The widgets to paint before a due layout pass: those waiting to be painted outside the conversation that
    are on screen (the input after a key, the status bar). A pane in a hidden tab, refreshed by a poll, waits
    for the pass: painting it would show nothing and would mark the compositor's map stale for nothing."""
    on_screen = screen._compositor.visible_widgets
    return {w for w in screen._dirty_widgets if (w is screen or w in on_screen) and _outside(w, conversation)}


def _paint_first(screen: Screen[Any], echo: set[Widget]) -> None:
    """Paint ``echo`` alone, against the compositor's map as it stands; the rest of the dirty set stays for the
    layout pass that follows. A widget the pass may resize (it asked for a layout: a sidebar pane given more
    lines), or one that holds or lies inside such a widget, waits for the pass too: painted in its old region it
    would show its new text cut for a frame. But for the focused one: the key's echo goes first whatever the pass
    resizes (without this exception the stream bench's echo p95 rose from ~36 to ~46 ms)."""
    from .full_map import kept

    dirty: set[Widget] = screen._dirty_widgets
    resizing = _resizing(screen)
    holding = {node for widget in resizing for node in widget.ancestors_with_self}
    focused = screen.focused
    first = {w for w in echo
             if w is focused or (w not in holding and not any(a in resizing for a in w.ancestors))}
    rest = dirty - first
    if first:
        with kept(screen._compositor):
            screen._compositor.update_widgets(first)
            screen._compositor_refresh()  # paints the dirty regions just added; empties the dirty set
    dirty.update(rest)


def _resizing(screen: Screen[Any]) -> set[Widget]:
    """The widgets the due layout pass may resize: those that asked for it, with their ancestors sized by their
    content (Textual's ``_layout_widgets``, the screen's record of Layout messages since the last pass, as of
    8.2)."""
    return set().union(*screen._layout_widgets.values())


def _input_queued(screen: Screen[Any]) -> bool:
    if not screen.app._message_queue.empty():
        return True
    focused = screen.focused
    return focused is not None and not focused._message_queue.empty()


def echo_pending(screen: Screen[Any], conversation: DOMNode | None) -> bool:
    """Whether input is on its way to the screen: an event queued in the app or at the focused widget, or a
    widget outside ``conversation`` waiting to be painted (a key's echo). Private Textual state as above."""
    try:
        if _input_queued(screen):
            return True
        return conversation is not None and bool(_echo(screen, conversation))
    except AttributeError:
        return False
