"""The merge view: two concurrent edits of a memory, the soul or the task list (ours lost to a newer one from
another writer).

Shows the diff (yours → theirs) beside an editor that starts with a line-by-line union (theirs, then the lines
only yours had). Saving goes through the one save path, based on theirs (a later edit for every device);
"Keep theirs" closes and leaves the memory as it is (your version stays in the history).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, cast

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, Footer, Static, TextArea

from ...errors import AgentError
from ...service.events import MemoryChanged
from ...service.labels import short_id
from ..actions import dialog_bindings
from ..widgets.publish_verdicts import verdict_lines
from .diff import diff_content

if TYPE_CHECKING:
    from textual.worker import Worker

    from ...service import MemoryType
    from ..app import DidactylApp


def union_draft(theirs: str, ours: str) -> str:
    """Theirs, then the lines only ours had (in our order): a starting point the user edits."""
    have = set(theirs.splitlines())
    extra = [line for line in ours.splitlines() if line not in have]
    if not extra:
        return theirs
    joined = theirs if theirs.endswith("\n") or not theirs else theirs + "\n"
    return joined + "\n".join(extra) + ("\n" if ours.endswith("\n") else "")


def merge_draft(theirs: str, ours: str) -> str:
    """The union draft; for a JSON document (the soul, the task list) whose union would not parse, theirs: the
    diff beside it shows what only yours had."""
    draft = union_draft(theirs, ours)
    if draft == theirs or not theirs.lstrip().startswith("{"):
        return draft
    try:
        json.loads(draft)
    except ValueError:
        return theirs
    return draft


def offer_merge(screen: Screen[object], event: MemoryChanged) -> None:
    """Open the merge view for a concurrent edit, unless the user is busy in another screen (the warning
    notification and the memory history still offer it then)."""
    if not event.lost_local or not event.lost_event_id or not event.winner_event_id:
        return
    if screen.app.screen is not screen:
        return
    screen.app.push_screen(MergeScreen(event.type, event.lost_event_id, event.winner_event_id))


class MergeScreen(Screen[None]):
    CSS_PATH = "merge.tcss"
    BINDINGS = dialog_bindings(close="Keep theirs", confirm="Save merged")

    def __init__(self, memory_type: MemoryType, ours_id: str, theirs_id: str) -> None:
        super().__init__()
        self.memory_type, self.ours_id, self.theirs_id = memory_type, ours_id, theirs_id
        self.ours_text: str | None = None
        self.theirs_text: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="merge") as box:
            box.border_title = f"Concurrent edits of the {self.memory_type.title.lower()}"
            yield Static(Content(
                f"Your version {short_id(self.ours_id)} and version {short_id(self.theirs_id)} from another writer "
                "were both edited from an older version. Theirs is newer and is now in use; yours is kept in "
                "the history. Edit the merged text (theirs, then the lines only yours had) and save, or keep "
                "theirs."), id="merge-about")
            with Horizontal(id="merge-body"):
                with VerticalScroll(id="merge-diff"):
                    yield Static(Content("Loading both versions…"), id="merge-diff-text")
                yield TextArea("", id="merge-text", soft_wrap=True, disabled=True)
            yield Static(Content(""), id="merge-result")
            with Horizontal(classes="pane-actions"):
                yield Button("Save merged", id="save-merged", variant="primary", compact=True, disabled=True)
                yield Button("Keep theirs", id="keep-theirs", compact=True)
        yield Footer()

    @property
    def text_area(self) -> TextArea:
        return self.query_one("#merge-text", TextArea)

    def on_mount(self) -> None:
        self.load()

    @work(exclusive=True, group="merge-load", exit_on_error=False)
    async def load(self) -> None:
        service = cast("DidactylApp", self.app).service
        if service is None:
            raise AgentError("not started: cannot load the versions", "Merge")
        ours = await service.memory_version(self.memory_type, self.ours_id)
        theirs = await service.memory_version(self.memory_type, self.theirs_id)
        # Decrypting a big memory is CPU work: off the UI loop.
        self.ours_text, self.theirs_text = await asyncio.to_thread(lambda: (ours.content, theirs.content))
        self.query_one("#merge-diff-text", Static).update(diff_content(
            self.ours_text, self.theirs_text, f"yours ({ours.label})", f"theirs ({theirs.label})"))
        self.text_area.load_text(merge_draft(self.theirs_text, self.ours_text))
        self.text_area.disabled = False
        self.query_one("#save-merged", Button).disabled = False
        self.text_area.focus()

    @on(Button.Pressed, "#save-merged")
    def action_confirm(self) -> None:
        if self.theirs_text is not None:
            self.save(self.text_area.text)

    @on(Button.Pressed, "#keep-theirs")
    def action_close(self) -> None:
        self.dismiss(None)

    @work(exclusive=True, group="merge-save", exit_on_error=False)
    async def save(self, text: str) -> None:
        app = cast("DidactylApp", self.app)
        if app.service is None:
            raise AgentError("not started: cannot save", "Merge")
        self._show(Content.styled("Saving…", "$text-muted"))
        try:
            result = await app.service.save_memory(self.memory_type, text)
        except AgentError as exc:
            self._show(Content.styled(f"Not saved: {exc.message}", "$text-error"))
            raise
        self._show(verdict_lines(result.outcome, app.relay_label, head="Merged and saved"))

    def _show(self, content: Content) -> None:
        self.query_one("#merge-result", Static).update(content)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        cast("DidactylApp", self.app).on_worker_state_changed(event)
