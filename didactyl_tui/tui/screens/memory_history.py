"""A memory's history — or the soul's, or the task list's: every version this app has seen (its own saves and
other writers'), newest first.

Pick a version to see what changed (against a marked version, or else the current one) or to roll back to it.
A rollback asks first and then saves that text as a new version through the normal save path, showing each
relay's verdict. Versions are decrypted only to show them, in a worker, and never stored as plaintext.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Static

from ...actions import keys_for
from ...errors import AgentError
from ...service.events import DocumentChanged, ServiceEvent
from ...service.labels import short_id, when
from ..actions import bindings
from ..widgets.publish_verdicts import verdict_lines
from .confirm import ConfirmScreen
from .diff import DiffScreen

if TYPE_CHECKING:
    from textual.worker import Worker

    from ...service.documents import DocumentService
    from ...service.views import DocumentVersionView
    from ..host import DidactylHost


def _older(a: VersionRow, b: VersionRow) -> bool:
    """NIP-01 order (the protocol's one rule, through the service)."""
    from ...service.types import is_newer

    return is_newer(b.event, a.event)


@dataclass(frozen=True)
class VersionRow:
    """What the table shows of one version (sizes come from decrypting it once, in a worker)."""

    event_id: str
    created_at: int
    origin: str
    note: str
    current: bool
    chars: int | None  # None: it cannot be read (``problem`` says why)
    event: Any = field(repr=False, compare=False)


def version_rows(versions: list[DocumentVersionView]) -> list[VersionRow]:
    rows = []
    for v in versions:
        chars = len(v.text) if v.text is not None else None
        rows.append(VersionRow(v.event_id, v.created_at, v.origin, v.note, v.current, chars, v.event))
    return rows


ROWS_PER_STEP = 40


class MemoryHistoryScreen(Screen[None]):
    CSS_PATH = "memory_history.tcss"  # read when first shown, not before the first frame
    BINDINGS = bindings("history")

    def __init__(self, memory_type: str, documents: DocumentService) -> None:
        super().__init__()
        from ...service.types import DocumentKey

        self._documents = documents
        self.memory_type = DocumentKey.parse(memory_type)  # the edge: the view's name of it, as the service's key
        self.rows: list[VersionRow] = []
        self.marked: str | None = None  # event id of the version to compare against

    @property
    def title_text(self) -> str:
        title = self.memory_type.title
        return title[:1] + title[1:].lower()  # "Short-term memory", "Task list"

    def compose(self) -> ComposeResult:
        with Vertical(id="memory-history") as box:
            box.border_title = f"{self.title_text}: history"
            keymap = self.didactyl.config.keys  # the keys in force, [keys] remaps included

            def key(action_id: str) -> str:
                return keys_for(action_id, keymap)

            yield Static(Content.styled(
                f"● current  ◆ marked  ·  {key('history_diff')}: diff against the marked (or current) version  ·  "
                f"{key('history_mark')}: mark  ·  {key('history_rollback')}: roll back to it", "$text-muted"),
                id="history-help")
            yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
            yield Static(Content(""), id="history-result")
            with Horizontal(classes="pane-actions"):
                yield Button("Diff", id="diff", compact=True)
                yield Button("Mark", id="mark", compact=True)
                yield Button("Roll back", id="rollback", compact=True, variant="warning")
                yield Button("Close", id="close", compact=True)
        yield Footer()

    @property
    def table(self) -> DataTable[Any]:
        return self.query_one("#history-table", DataTable)

    def on_mount(self) -> None:
        # Fixed widths: the cells are theme-styled Content, which the table does not measure.
        for label, width in ((" ", 1), ("When", 19), ("Event", 12), ("Origin", 6), ("Size", 16), ("Note", 48)):
            self.table.add_column(label, width=width)
        self.table.focus()
        self.didactyl.follow_service(self, self.on_service_event)
        self.reload()

    @property
    def didactyl(self) -> DidactylHost:
        return cast("DidactylHost", self.app)

    # --- the list -------------------------------------------------------------------------------

    @work(exclusive=True, group="history-load", exit_on_error=False)
    async def reload(self) -> None:
        versions = await self._documents.history(self.memory_type)
        rows = await asyncio.to_thread(version_rows, versions)  # decrypting many versions is work
        await self.show_rows(rows)

    async def show_rows(self, rows: list[VersionRow]) -> None:
        """Fill the table, ROWS_PER_STEP rows at a time: a long history never holds the UI loop in one go."""
        table = self.table
        selected = self.selected_id()
        self.rows = rows
        if self.marked not in {r.event_id for r in rows}:
            self.marked = None
        table.clear()
        for start in range(0, len(rows), ROWS_PER_STEP):
            for row in rows[start:start + ROWS_PER_STEP]:
                table.add_row(*self._cells(row), key=row.event_id)
            await asyncio.sleep(0)
        if not rows:
            self._show_result(Content.styled("No version seen yet.", "$text-muted"))
        ids = [r.event_id for r in rows]
        if selected in ids:
            table.move_cursor(row=ids.index(selected))

    @work(exclusive=True, group="history-load", exit_on_error=False)
    async def redraw(self) -> None:
        await self.show_rows(self.rows)

    def _cells(self, row: VersionRow) -> tuple[Content, ...]:
        mark = "●" if row.current else ("◆" if row.event_id == self.marked else "")
        size = f"{row.chars:,} chars" if row.chars is not None else "does not decrypt"
        return (
            Content.styled(mark, "$text-accent"),
            Content(when(row.created_at)),
            Content(row.event_id[:12]),
            Content.styled(row.origin, "$text-muted" if row.origin == "remote" else ""),
            Content(size),
            Content.styled(row.note, "$text-warning") if row.note else Content(""),
        )

    def selected_id(self) -> str | None:
        if not self.rows:
            return None
        index = self.table.cursor_row
        return self.rows[index].event_id if 0 <= index < len(self.rows) else None

    def select(self, event_id: str) -> None:
        """Move the cursor to a version (tests and callers)."""
        ids = [r.event_id for r in self.rows]
        self.table.move_cursor(row=ids.index(event_id))

    def _row(self, event_id: str | None) -> VersionRow | None:
        return next((r for r in self.rows if r.event_id == event_id), None)

    def on_service_event(self, event: ServiceEvent) -> None:
        if isinstance(event, DocumentChanged) and event.type == self.memory_type:
            self.reload()  # a new version (ours or another device's) joins the list

    # --- mark and diff ------------------------------------------------------------------------------

    def action_mark(self) -> None:
        chosen = self.selected_id()
        if chosen is None:
            return
        self.marked = None if self.marked == chosen else chosen
        self.redraw()

    @on(DataTable.RowSelected, "#history-table")
    def _row_selected(self) -> None:
        self.action_diff()

    def action_diff(self) -> None:
        chosen = self._row(self.selected_id())
        if chosen is None:
            return
        other = self._row(self.marked) if self.marked not in (None, chosen.event_id) else None
        if other is None:
            current = next((r for r in self.rows if r.current), None)
            if current is not None and current.event_id != chosen.event_id:
                other = current
            else:  # the current one itself: compare with the version before it
                other = next((r for r in self.rows if _older(r, chosen)), None)  # rows are newest first
        if other is None:
            self.notify("Only one version: nothing to compare with.", title="Diff")
            return
        old, new = (chosen, other) if _older(chosen, other) else (other, chosen)
        self.show_diff(old, new)

    @work(group="history-diff", exit_on_error=False)
    async def show_diff(self, old: VersionRow, new: VersionRow) -> None:
        older = await self._documents.version(self.memory_type, old.event_id)
        newer = await self._documents.version(self.memory_type, new.event_id)
        old_text, new_text = older.content, newer.content  # (read when the history was listed)
        self.app.push_screen(DiffScreen(
            old_text, new_text, title=f"{self.title_text}: {short_id(old.event_id)} → {short_id(new.event_id)}",
            old_label=older.label, new_label=newer.label,
        ))

    # --- roll back ---------------------------------------------------------------------------------------

    async def action_rollback(self) -> None:
        chosen = self._row(self.selected_id())
        if chosen is None:
            return
        if chosen.current:
            self.notify("That is the current version already.", title="Roll back")
            return
        if chosen.chars is None:
            self.notify("That version does not decrypt with this key.", title="Roll back", severity="warning")
            return
        question = (f"Roll the {self.title_text.lower()} back to version {short_id(chosen.event_id)} of "
                    f"{when(chosen.created_at)} ({chosen.chars:,} chars)?\n\nIts text is saved as a new version "
                    "and published to every relay; the current text stays in this history.")
        def answered(yes: bool | None) -> None:
            if yes:
                self.rollback(chosen.event_id)

        await self.app.push_screen(ConfirmScreen(question, title="Roll back", confirm_label="Roll back"), answered)

    @work(exclusive=True, group="history-rollback", exit_on_error=False)
    async def rollback(self, event_id: str) -> None:
        self._show_result(Content.styled(f"Rolling back to {short_id(event_id)}…", "$text-muted"))
        try:
            result = await self._documents.rollback(self.memory_type, event_id)
        except AgentError as exc:
            self._show_result(Content.styled(f"Not rolled back: {exc.message}", "$text-error"))
            raise
        self._show_result(verdict_lines(result.outcome, self.didactyl.relay_label,
                                        head=f"Rolled back to {short_id(event_id)}: saved"))
        self.reload()

    def _show_result(self, content: Content) -> None:
        self.query_one("#history-result", Static).update(content)

    # --- buttons and closing ------------------------------------------------------------------------------

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id in ("diff", "mark", "rollback", "close"):
            await self.run_action(event.button.id)

    def action_close(self) -> None:
        self.dismiss(None)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Worker.StateChanged does not bubble: hand this screen's worker errors to the app's one handler.
        self.didactyl.on_worker_state_changed(event)
