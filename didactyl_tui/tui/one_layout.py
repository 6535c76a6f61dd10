"""One layout pass per paint while a reply streams.

After a layout pass Textual hands each widget the size it was just arranged at; a widget whose virtual size
changed (every block a paint mounts: it had none) asks for a layout again, so each paint of a streaming reply
was laid out twice, the second time to the same result (~12 ms over the whole screen each). While a reply
streams, requests raised by the pass itself are dropped; requests made before it, or by anything else after
it, stand. Outside streaming nothing changes (a resumed chat's stubs place entries using the second pass).
"""

from __future__ import annotations

from collections.abc import Callable

from textual.screen import Screen


def layout_once(screen: Screen, run_layout: Callable[[], None]) -> None:
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
    run_layout()
    for widget in screen._compositor.widgets:
        if widget._layout_required and widget not in waiting:
            widget._layout_required = False
