"""What every dialog shares: its keys from the action table (``dialog_bindings``: ``[keys] close`` and
``confirm`` remap them in every dialog), a footer that shows them as they are now, and its first focus given
as it is composed (``AUTO_FOCUS``), before any key typed behind the one that opened it is read: a focus set
later (``focus()`` in ``on_mount`` runs after the keys already queued) took the field back from under them. A
dialog taller than the terminal opens at its top (its title, what is in use), whatever its first focus."""

from __future__ import annotations

from typing import TypeVar

from textual.containers import ScrollableContainer
from textual.screen import ModalScreen

ResultT = TypeVar("ResultT")


class Dialog(ModalScreen[ResultT]):
    """A modal dialog. Subclasses set ``BINDINGS = dialog_bindings(...)`` and ``AUTO_FOCUS``, and end their
    ``compose`` with ``yield Footer()``."""

    CSS_PATH = "dialogs.tcss"  # read when first shown, not before the first frame

    def __init__(self) -> None:
        super().__init__(classes="dialog-screen")

    def on_mount(self) -> None:
        # After the first layout, and after Textual's own scroll that centres the first focus when it does not fit.
        self.call_after_refresh(self.call_after_refresh, self.open_at_top)

    def open_at_top(self) -> None:
        """Scroll every part of the dialog to its top; then the focus into view with the least scroll (it is near
        the top in every dialog, so the title stays)."""
        for box in self.query(ScrollableContainer):
            box.scroll_home(animate=False, immediate=True)
        if self.focused is not None:
            self.focused.scroll_visible(animate=False, immediate=True)

