"""What every dialog shares: its keys from the action table (``dialog_bindings``: ``[keys] close`` and
``confirm`` remap them in every dialog), a footer that shows them as they are now, and its first focus given
as it is composed (``AUTO_FOCUS``), before any key typed behind the one that opened it is read: a focus set
later (``focus()`` in ``on_mount`` runs after the keys already queued) took the field back from under them."""

from __future__ import annotations

from typing import TypeVar

from textual.screen import ModalScreen

ResultT = TypeVar("ResultT")


class Dialog(ModalScreen[ResultT]):
    """A modal dialog. Subclasses set ``BINDINGS = dialog_bindings(...)`` and ``AUTO_FOCUS``, and end their
    ``compose`` with ``yield Footer()``."""

    CSS_PATH = "dialogs.tcss"  # read when first shown, not before the first frame

    def __init__(self) -> None:
        super().__init__(classes="dialog-screen")
