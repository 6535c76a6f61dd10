"""A memory pane: the decrypted memory, live, with its gauge, and buttons to edit or load it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Button, Static

from ...service.labels import MINUTES, short_id, when
from ...terminal_text import clean
from .memory_gauge import MemoryGauge

if TYPE_CHECKING:
    from ...service.types import DocumentSnapshot


def describe_source(snapshot: DocumentSnapshot) -> str:
    """``event 1a2b3c4d · 2025-01-02 10:11 · on 2 relays`` (public data only)."""
    if not snapshot.loaded:
        return "not loaded"
    if snapshot.event_id is None:
        return "empty: nothing published yet"
    parts = [f"event {short_id(snapshot.event_id)}"]
    if snapshot.created_at is not None:
        parts.append(when(snapshot.created_at, MINUTES))
    n = len(snapshot.relays)
    parts.append(f"on {n} relay{'s' if n != 1 else ''}")
    if snapshot.unreadable is not None:  # persistent until a newer readable version (e.g. our save) replaces it
        bad = snapshot.unreadable
        why = "does not decrypt" if bad.undecryptable else "cannot be used"
        parts.append(f"newer {short_id(bad.event_id)} {why}: save to overwrite")
    return " · ".join(parts)


class MemoryPane(Vertical):
    """Shows one memory (short- or long-term). The screen calls :meth:`show_snapshot`; it posts requests."""

    @dataclass
    class EditRequested(Message):
        """The user asked to edit this memory."""

        memory_type: str

    @dataclass
    class HistoryRequested(Message):
        """The user asked for this memory's history (versions, diffs, rollback)."""

        memory_type: str

    @dataclass
    class LoadRequested(Message):
        """The user asked to (re)load this memory from the relays."""

        memory_type: str

    def __init__(self, memory_type: str, title: str, *, limit: int, loadable: bool,
                 id: str | None = None) -> None:
        super().__init__(id=id, classes="memory-pane")
        self.memory_type = memory_type
        self.loadable = loadable
        self.snapshot: DocumentSnapshot | None = None
        self._limit = limit
        self.border_title = title
        self.border_subtitle = "starting…"

    def compose(self) -> ComposeResult:
        yield MemoryGauge(self._limit)
        with VerticalScroll(classes="memory-scroll"):
            yield Static(Content(""), classes="memory-content")
        with Horizontal(classes="pane-actions"):
            yield Button("Edit", id="edit", compact=True, disabled=True)
            yield Button("History", id="history", compact=True, disabled=True)
            if self.loadable:
                yield Button("Load", id="load", compact=True, disabled=True)

    def show_snapshot(self, snapshot: DocumentSnapshot) -> None:
        self.snapshot = snapshot
        self.border_subtitle = describe_source(snapshot)
        self.query_one(MemoryGauge).show(snapshot.chars, snapshot.utf8_bytes, snapshot.limit_chars, snapshot.max_bytes)
        content = snapshot.content if snapshot.loaded else ""
        placeholder = ("(empty)" if snapshot.loaded else
                       "(not loaded yet: press Load)" if self.loadable else "(loading…)")
        body = self.query_one(".memory-content", Static)
        body.update(Content(clean(content)) if content else Content(placeholder))
        body.set_class(not content, "-placeholder")
        self.query_one("#edit", Button).disabled = not snapshot.loaded
        self.query_one("#history", Button).disabled = False
        if self.loadable:
            load = self.query_one("#load", Button)
            load.disabled = False
            load.label = "Reload" if snapshot.loaded else "Load"

    def show_unavailable(self, reason: str) -> None:
        """The memory cannot be shown or edited here (attached without the agent's key): the reason, nothing to
        press."""
        self.border_subtitle = "not available here"
        body = self.query_one(".memory-content", Static)
        body.update(Content(reason))
        body.set_class(True, "-placeholder")
        for button in self.query(Button):
            button.disabled = True

    def show_loading(self) -> None:
        self.border_subtitle = "loading…"
        if self.loadable:
            self.query_one("#load", Button).disabled = True

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "edit":
            self.post_message(self.EditRequested(self.memory_type))
        elif event.button.id == "history":
            self.post_message(self.HistoryRequested(self.memory_type))
        elif event.button.id == "load":
            self.post_message(self.LoadRequested(self.memory_type))
