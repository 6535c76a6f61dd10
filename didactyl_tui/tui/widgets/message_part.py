"""A message's Markdown whose height is measured once per width, not once per height of the message around it.

Textual measures a container whose children all have a dynamic height (``auto``, ``fr``, ``%``) by arranging
it inside its parent's height, so the arrangement it caches is keyed by that height. A streaming reply's
entry grows on every paint, so each displayed part of it (and each list and fence inside) was re-arranged and
its text re-wrapped on every frame (~45% of a frame in a 10,000-token reply, measured). A Markdown's blocks
are all ``height: auto``: their arrangement does not depend on the height around them, so the part is measured
at height 0, which its cache keeps for as long as its width and children do not change. Same heights, same
picture; only the cost differs.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.widgets import Markdown


class MessagePart(Markdown):
    """A Markdown (the whole of a message, or one part of a long streamed reply)."""

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if not width or not self._nodes:
            return 0
        if any(not child.styles.is_auto_height for child in self.displayed_children):
            return super().get_content_height(container, viewport, width)  # fr or % children: as Textual does
        return self.arrange(Size(width, 0)).total_region.height
