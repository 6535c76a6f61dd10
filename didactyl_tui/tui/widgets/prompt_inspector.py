"""The prompt inspector pane: one entry per assembly (every turn, every dry run) of the chat on screen, newest last.

It holds the chat's last ``keep`` (``[llm] saved_assemblies``, as many as the chat keeps on disk): each entry holds its
whole prompt, its reply and hundreds of tree nodes, so an app used all day would otherwise keep every prompt it ever
sent (#34). A new chat starts it empty; a resumed one brings its own back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button

from ..actions import bindings
from .assembly_tree import AssemblyTree, InspectorEntry

if TYPE_CHECKING:
    from ...service.types import PromptAssembly, SavedAssembly, TurnFinished


class PromptInspector(Vertical):
    """Holds the entries; posts requests for a dry run, opening an entry, or diffing it."""

    BINDINGS = bindings("inspector")

    @dataclass
    class DryRunRequested(Message):
        """The user asked to assemble the next prompt without calling the model."""

    @dataclass
    class OpenRequested(Message):
        """The user asked to see one entry full-screen."""

        entry: InspectorEntry

    @dataclass
    class DiffRequested(Message):
        """The user asked for the difference between an entry and the one before it."""

        entry: InspectorEntry
        previous: InspectorEntry | None

    def __init__(self, *, id: str | None = None, keep: int = 20) -> None:
        super().__init__(id=id, classes="prompt-inspector")
        self.border_title = "Prompt inspector"
        self.entries: list[InspectorEntry] = []
        self.keep = max(1, keep)
        self._numbers = 0  # the last entry's number (numbers go on as the oldest entries leave)

    def compose(self) -> ComposeResult:
        with Horizontal(classes="pane-actions"):
            yield Button("Dry run", id="dry-run", compact=True)
            yield Button("Open", id="open", compact=True)
            yield Button("Diff", id="diff", compact=True)
        from ...actions import keys_for

        keymap = getattr(self.app, "config", None)
        open_key = keys_for("inspector_open", keymap.keys if keymap is not None else None)
        yield AssemblyTree(cut_hint=f"… ({open_key})")

    @property
    def assembly_tree(self) -> AssemblyTree:
        return self.query_one(AssemblyTree)

    # --- attributes down ----------------------------------------------------------------------

    def add_assembly(self, assembly: PromptAssembly) -> InspectorEntry:
        """Add an entry (each assembly arrives once, as the service's PromptAssembled); the newest one opens."""
        self._numbers += 1
        entry = InspectorEntry(number=self._numbers, assembly=assembly)
        self.entries.append(entry)
        tree = self.assembly_tree
        while len(self.entries) > self.keep:
            tree.remove_entry(self.entries.pop(0).number)
        for older in self.entries[:-1]:
            node = tree.node_for(older.number)
            if node is not None:
                node.collapse()
        node = tree.add_entry(entry, expand=True)
        # The tree lays out its lines on the next refresh; the cursor can only land there after it.
        tree.call_after_refresh(tree.move_cursor, node)
        return entry

    def load_saved(self, saved: list[SavedAssembly]) -> None:
        """A resumed chat's kept assemblies replace what is shown (each with its reply or why it failed)."""
        from ...service.types import Usage

        self.clear()
        for item in saved:
            entry = self.add_assembly(item.assembly)
            entry.reply, entry.failure = item.reply, item.failure
            if item.prompt_tokens is not None or item.cost_usd is not None:
                entry.usage = Usage(item.prompt_tokens, item.completion_tokens, item.cost_usd)
            self.assembly_tree.refresh_entry(entry)

    def clear(self) -> None:
        """No entry: a new chat (its first prompt is #1)."""
        self.entries.clear()
        self._numbers = 0
        self.assembly_tree.clear_entries()

    def last_turn_entry(self) -> InspectorEntry | None:
        for entry in reversed(self.entries):
            if not entry.assembly.dry_run:
                return entry
        return None

    def finish_turn(self, finished: TurnFinished) -> None:
        entry = self.last_turn_entry()
        if entry is None:
            return
        entry.reply = finished.reply
        entry.tool_calls = list(finished.tool_calls)
        entry.usage = finished.usage
        # Its tree after the frame that ends the reply (~10 ms of nodes, not between the last words and the screen).
        self.call_after_refresh(self.assembly_tree.refresh_entry, entry)

    def fail_turn(self, message: str) -> None:
        entry = self.last_turn_entry()
        if entry is None or entry.reply is not None:
            return
        entry.failure = message
        self.assembly_tree.refresh_entry(entry)

    def previous_of(self, entry: InspectorEntry) -> InspectorEntry | None:
        i = self.entries.index(entry)
        return self.entries[i - 1] if i > 0 else None

    # --- requests up ----------------------------------------------------------------------------

    def action_open(self) -> None:
        entry = self.assembly_tree.entry_at_cursor() or (self.entries[-1] if self.entries else None)
        if entry is not None:
            self.post_message(self.OpenRequested(entry))

    def action_diff(self) -> None:
        entry = self.assembly_tree.entry_at_cursor() or (self.entries[-1] if self.entries else None)
        if entry is not None:
            self.post_message(self.DiffRequested(entry, self.previous_of(entry)))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "dry-run":
            self.post_message(self.DryRunRequested())
        elif event.button.id == "open":
            self.action_open()
        elif event.button.id == "diff":
            self.action_diff()
