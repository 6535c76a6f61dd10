"""The compositor's full map kept while a reply streams, instead of being arranged again and again.

Textual's compositor keeps a *full map* (where every displayed widget is) and marks it stale on three occasions;
the next widget asked for its region then arranges the whole screen again. While a reply streams that was several
times a paint, each as costly as a layout pass (py-spy: ~10% of the app's CPU, and on the keys' way to the screen):

- after a layout pass (``reflow``), which has just arranged that very map (same root, same size) but leaves the
  mark a scroll or a mount set before it;
- when a widget that is not on screen is repainted (``update_widgets``: a block the pass just sized below the
  fold, a fold spacer, a pane in a hidden tab): Textual takes any widget off screen for a new one, but a widget
  already in the map is not new, and it keeps its place until the next layout pass, as widgets on screen do.

Here both keep the map fresh, and only while ``kept`` holds (the fast path's updates of a streaming screen). A
widget that is new (not in the map) still marks it stale. Private Textual state (as of 8.2): a Textual without
these attributes gets its own behaviour.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_SHADOWED = ("reflow", "update_widgets")


@contextmanager
def kept(compositor: Any) -> Iterator[None]:
    """Within this block (nestable), ``compositor`` keeps its full map fresh as said in the module's docstring."""
    if compositor is None or any(name in vars(compositor) for name in _SHADOWED) or not all(
        hasattr(compositor, name) for name in (*_SHADOWED, "_full_map", "_full_map_invalidated")
    ):
        yield  # already kept by an outer block, or a Textual without this state
        return
    reflow, update_widgets = compositor.reflow, compositor.update_widgets

    def reflow_keeping_map(parent: Any, size: Any) -> Any:
        result = reflow(parent, size)
        compositor._full_map_invalidated = False  # the map the pass arranged is the full map
        return result

    def update_keeping_map(widgets: Any) -> Any:
        fresh = not compositor._full_map_invalidated
        result = update_widgets(widgets)
        if fresh and compositor._full_map_invalidated and all(w in compositor._full_map for w in widgets):
            compositor._full_map_invalidated = False  # none of them is new: the map holds each one's place
        return result

    compositor.reflow, compositor.update_widgets = reflow_keeping_map, update_keeping_map
    try:
        yield
    finally:
        for name in _SHADOWED:  # the instance attributes go: the class's methods again
            vars(compositor).pop(name, None)
