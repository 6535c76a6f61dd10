"""The merge view: two concurrent edits of a memory, the soul or the task list (ours lost to a newer one from
another writer).

Shows the diff (yours → theirs) beside an editor that starts with the two versions merged from their common base
(three-way: a line one side deleted stays deleted, a change made on one side only is taken, and where both changed
the same lines both are kept between conflict markers for you to resolve); when no common base is known the merge is
two-way and every difference is marked. The conflict count follows the edits; saving is refused while markers
remain. "Draft with the model" asks the configured model to resolve the marked conflicts and shows its proposal as a
diff to accept or discard. Saving goes through the one save path, based on theirs (a later edit for every device);
"Keep theirs" closes and leaves the document as it is (your version stays in the history).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, Footer, Static, TextArea

from ...errors import AgentError
from ...service.events import DocumentChanged
from ...service.labels import short_id
from ...service.types import END, START, conflicts_left
from ..actions import dialog_bindings
from ..widgets.publish_verdicts import verdict_lines
from .dialog import Dialog
from .diff import diff_content

if TYPE_CHECKING:
    from textual.worker import Worker

    from ...service.documents import DocumentService
    from ...service.merge import MergeDraft, MergeService
    from ...service.model import ModelService
    from ...service.screen_api import ScreenService
    from ...service.types import DocumentKey
    from ..host import DidactylHost


def offer_merge(screen: Screen[Any], event: DocumentChanged, service: ScreenService | None) -> None:
    """Open the merge view for a concurrent edit, unless the user is busy in another screen (the warning
    notification and the memory history still offer it then)."""
    if not event.lost_local or not event.lost_event_id or not event.winner_event_id:
        return
    if screen.app.screen is not screen or service is None or not service.started:
        return
    screen.app.push_screen(MergeScreen(event.type, event.lost_event_id, event.winner_event_id,
                                       service.documents, service.merges, service.model))


class ProposalScreen(Dialog[bool]):
    """The model's proposal as a diff against the current draft: dismissed True (accept: the confirm key) or False
    (discard: the close key)."""

    BINDINGS = dialog_bindings(close="Discard", confirm="Accept")
    AUTO_FOCUS = "#accept-proposal"

    def __init__(self, current: str, proposed: str) -> None:
        super().__init__()
        self.current, self.proposed = current, proposed

    def compose(self) -> ComposeResult:
        with Vertical(id="proposal-dialog", classes="dialog") as box:
            box.border_title = "The model's draft"
            left = conflicts_left(self.proposed)
            yield Static(Content("Changes it makes to your draft. Nothing is saved: accept puts it in the editor." + (
                f" It still marks {left} conflict{'s' if left != 1 else ''}." if left else "")), id="proposal-about")
            with VerticalScroll(id="proposal-scroll"):
                yield Static(diff_content(self.current, self.proposed, "your draft", "the model's draft"),
                             id="proposal-diff")
            with Horizontal(classes="dialog-actions"):
                yield Button("Accept", id="accept-proposal", variant="primary")
                yield Button("Discard", id="discard-proposal")
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "accept-proposal")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_close(self) -> None:
        self.dismiss(False)


class MergeScreen(Screen[None]):
    CSS_PATH = "merge.tcss"
    BINDINGS = dialog_bindings(close="Keep theirs", confirm="Save merged", model_draft="Draft with the model")

    def __init__(self, memory_type: DocumentKey, ours_id: str, theirs_id: str, documents: DocumentService,
                 merges: MergeService, model: ModelService) -> None:
        super().__init__()
        self._documents, self._merges, self._model = documents, merges, model
        self.memory_type, self.ours_id, self.theirs_id = memory_type, ours_id, theirs_id
        self.ours_text: str | None = None
        self.theirs_text: str | None = None
        self.draft: MergeDraft | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="merge") as box:
            box.border_title = f"Concurrent edits of the {self.memory_type.title.lower()}"
            yield Static(Content(
                f"Your version {short_id(self.ours_id)} and version {short_id(self.theirs_id)} from another writer "
                "were both edited from an older version. Theirs is newer and is now in use; yours is kept in "
                "the history. The editor holds both merged from that older version: resolve each conflict marked "
                f"{START} … {END} (yours first) and save, or keep theirs."), id="merge-about")
            yield Static(Content(""), id="merge-conflicts")
            with Horizontal(id="merge-body"):
                with VerticalScroll(id="merge-diff"):
                    yield Static(Content("Loading both versions…"), id="merge-diff-text")
                yield TextArea("", id="merge-text", soft_wrap=True, disabled=True)
            yield Static(Content(""), id="merge-result")
            with Horizontal(classes="pane-actions"):
                yield Button("Save merged", id="save-merged", variant="primary", compact=True, disabled=True)
                yield Button("Draft with the model", id="model-draft", compact=True, disabled=True)
                yield Button("Keep theirs", id="keep-theirs", compact=True)
        yield Footer()

    @property
    def text_area(self) -> TextArea:
        return self.query_one("#merge-text", TextArea)

    @property
    def conflicts(self) -> int:
        """Conflicts still marked in the editor."""
        return conflicts_left(self.text_area.text)

    def on_mount(self) -> None:
        self.load()

    @work(exclusive=True, group="merge-load", exit_on_error=False)
    async def load(self) -> None:
        ours = await self._documents.version(self.memory_type, self.ours_id)
        theirs = await self._documents.version(self.memory_type, self.theirs_id)
        self.ours_text, self.theirs_text = ours.content, theirs.content  # (read off the loop by the service)
        self.query_one("#merge-diff-text", Static).update(diff_content(
            self.ours_text, self.theirs_text, f"yours ({ours.label})", f"theirs ({theirs.label})"))
        self.draft = await self._merges.draft(self.memory_type, self.ours_id, self.theirs_id)
        self.text_area.load_text(self.draft.text)
        self.text_area.disabled = False
        self.query_one("#save-merged", Button).disabled = False
        self.query_one("#model-draft", Button).disabled = not self._model.configured
        self._show_conflicts()
        self.text_area.focus()

    @on(TextArea.Changed, "#merge-text")
    def _edited(self) -> None:
        if self.draft is not None:
            self._show_conflicts()

    def _show_conflicts(self) -> None:
        draft, left = self.draft, self.conflicts
        parts: list[Content] = []
        if draft is not None and draft.base_id is None:
            parts.append(Content.styled(f"Two-way merge: {draft.why_two_way}; every difference is marked. ",
                                        "$text-warning"))
        elif draft is not None:
            parts.append(Content(f"Merged from their common base {short_id(draft.base_id or '')}. "))
        if left:
            parts.append(Content.styled(f"{left} conflict{'s' if left != 1 else ''} to resolve.", "$text-warning"))
        else:
            parts.append(Content("No conflict marked."))
        if draft is not None and draft.problem and self.text_area.text == draft.text:
            parts.append(Content.styled(f" The merged {self.memory_type.title.lower()} does not read: "
                                        f"{draft.problem}", "$text-error"))
        self.query_one("#merge-conflicts", Static).update(Content("").join(parts))

    @on(Button.Pressed, "#save-merged")
    def action_confirm(self) -> None:
        if self.theirs_text is None:
            return
        left = self.conflicts
        if left:  # the text stays in the editor
            self._show(Content.styled(
                f"Not saved: {left} conflict{'s are' if left != 1 else ' is'} still marked ({START} … {END}); "
                "resolve them, or draft with the model.", "$text-error"))
            return
        self.save(self.text_area.text)

    @on(Button.Pressed, "#keep-theirs")
    def action_close(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#model-draft")
    def action_model_draft(self) -> None:
        if self.draft is not None and not self.query_one("#model-draft", Button).disabled:
            self.model_draft(self.text_area.text)

    @work(exclusive=True, group="merge-model", exit_on_error=False)
    async def model_draft(self, current: str) -> None:
        button = self.query_one("#model-draft", Button)
        button.disabled = True
        self._show(Content.styled(f"Asking {self._model.name} to resolve the conflicts…", "$text-muted"))
        try:
            proposed = await self._merges.model_draft(self.memory_type, current)
        except AgentError as exc:
            self._show(Content.styled(f"No draft from the model: {exc.message}", "$text-error"))
            raise
        finally:
            button.disabled = False
        accepted = await self.app.push_screen_wait(ProposalScreen(current, proposed))
        if accepted and self.text_area.text == current:
            self.text_area.load_text(proposed)
            self._show(Content("The model's draft is in the editor: check it, then save."))
        elif accepted:
            self._show(Content.styled("Not applied: the draft changed while the model was working.", "$text-warning"))
        else:
            self._show(Content("The model's draft was discarded; your draft is unchanged."))

    @work(exclusive=True, group="merge-save", exit_on_error=False)
    async def save(self, text: str) -> None:
        app = cast("DidactylHost", self.app)
        self._show(Content.styled("Saving…", "$text-muted"))
        try:
            result = await self._documents.save(self.memory_type, text)
        except AgentError as exc:
            self._show(Content.styled(f"Not saved: {exc.message}", "$text-error"))
            raise
        self._show(verdict_lines(result.outcome, app.relay_label, head="Merged and saved"))

    def _show(self, content: Content) -> None:
        self.query_one("#merge-result", Static).update(content)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        cast("DidactylHost", self.app).on_worker_state_changed(event)
