"""Folding: a laid-out widget far from the viewport hides behind one blank spacer of the same size.

Textual lays out every displayed widget of a screen on each layout pass (and again when it rebuilds its full
map after a scroll), so a long conversation, or one long streamed reply with hundreds of markdown blocks, makes
every frame slower as it grows. A folded widget is ``display: none``: its subtree is skipped by layout and
rendering, while the spacer keeps its place (same height, same margins), so scroll positions and the
scrollbar do not move. Unfolding shows the widget again as it was (nothing is re-parsed or re-mounted).
"""

from __future__ import annotations

from textual.widget import Widget


class FoldSpacer(Widget):
    """Blank space standing in for a folded widget."""

    DEFAULT_CSS = "FoldSpacer { height: 1; }"

    def __init__(self, folded: Widget, height: int) -> None:
        super().__init__(classes="fold-spacer")
        self.folded = folded
        self.styles.height = height
        self.styles.margin = folded.styles.margin

    def render(self) -> str:
        return ""


def spacer_of(widget: Widget) -> FoldSpacer | None:
    spacer = getattr(widget, "_fold_spacer", None)
    return spacer if isinstance(spacer, FoldSpacer) and spacer.parent is not None else None


def fold(widget: Widget) -> bool:
    """Fold a laid-out widget (no-op when it is folded, hidden or not laid out yet). Returns True if folded."""
    parent = widget.parent
    if spacer_of(widget) is not None or not widget.display or not isinstance(parent, Widget):
        return False
    height = widget.outer_size.height
    if height <= 0:
        return False
    spacer = FoldSpacer(widget, height)
    widget._fold_spacer = spacer  # type: ignore[attr-defined]
    parent.mount(spacer, before=widget)
    widget.display = False
    return True


def unfold(widget: Widget) -> bool:
    """Show a folded widget again in its spacer's place. Returns True if it was folded."""
    spacer = spacer_of(widget)
    if spacer is None:
        return False
    widget._fold_spacer = None  # type: ignore[attr-defined]
    widget.display = True
    spacer.remove()
    return True


def refold(container: Widget, candidates: list[Widget], margin_screens: float = 1.0, *, fold_far: bool = True) -> int:
    """Fold each candidate lying wholly outside the viewport of ``container`` widened by ``margin_screens``
    screens above and below (unless not ``fold_far``); unfold the folded ones inside it. Returns how many
    changed."""
    view = container.region
    if not view.height:
        return 0
    margin = int(view.height * margin_screens)
    top, bottom = view.y - margin, view.bottom + margin
    changed = 0
    for widget in candidates:
        spacer = spacer_of(widget)
        shown = spacer if spacer is not None else widget
        region = shown.region  # screen coordinates, off-screen ones too (the compositor's full map)
        far = not region.height or region.bottom < top or region.y > bottom
        if spacer is None and far and region.height and fold_far:
            changed += fold(widget)
        elif spacer is not None and not far:
            changed += unfold(widget)
    return changed
