"""The memory editor: a markdown TextArea with a live gauge; saves through the same path as ``memory_save``.
The soul and the task list (JSON documents) edit here too, each through its own one save path (the soul linted
before anything is signed: a refused soul names its section, publishes nothing, and the text stays).

It never silently overwrites: if a newer version arrives while editing (another device, or the agent's own
``memory_save``), it says so and offers to view the difference, keep theirs, or overwrite. Over the limit,
the save is refused and the text stays. Closing with unsaved text asks first (save / discard / keep editing),
and the text is kept as a draft file while typing (service/drafts.py), so a crash or a quit loses nothing: the
editor opens with it next time.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, Footer, Static, TextArea
from textual.widgets.text_area import LanguageDoesNotExist

from ...errors import DidactylError
from ...service.drafts import read_draft, remove_draft, write_draft
from ...service.events import DocumentChanged, ServiceEvent
from ...service.labels import CLOCK, version_label, when
from ...terminal_text import clean
from ..actions import bindings
from ..widgets.memory_gauge import MemoryGauge
from ..widgets.publish_verdicts import verdict_lines
from .diff import DiffScreen

if TYPE_CHECKING:
    from textual.timer import Timer
    from textual.worker import Worker

    from ...service.documents import DocumentService
    from ...service.model import ModelService
    from ...service.types import DocumentSnapshot, PublishOutcome
    from ..host import DidactylHost


MEMORIES = ("short_term", "long_term")  # markdown; the other documents (soul, tasks, profile…) are JSON


def _version(snapshot: DocumentSnapshot) -> str:
    return version_label(snapshot.event_id, snapshot.created_at)


def _editor(text: str, language: str) -> TextArea:
    text = clean(text)  # the memory came from a relay: no escape sequence reaches the terminal (nor the next save)
    options: dict[str, Any] = {"soft_wrap": True, "show_line_numbers": True, "tab_behavior": "indent",
                               "id": "editor-text"}
    try:
        return TextArea(text, language=language, **options)
    except LanguageDoesNotExist:  # tree-sitter without its markdown grammar: plain text still edits
        return TextArea(text, **options)


class MemoryEditorScreen(Screen[None]):
    CSS_PATH = "memory_editor.tcss"  # read when first shown, not before the first frame
    BINDINGS = bindings("editor")

    def __init__(self, snapshot: DocumentSnapshot, documents: DocumentService, model: ModelService) -> None:
        super().__init__()
        self._documents, self._model = documents, model
        self.memory_type = snapshot.type
        self.base = snapshot  # the version this edit started from (or last agreed with)
        self.theirs: DocumentSnapshot | None = None  # a newer version that arrived while editing
        self._saving_text: str | None = None
        self._draft_timer: Timer | None = None
        self._token_timer: Timer | None = None

    DRAFT_DELAY_S = 0.5  # typing pauses this long before the draft is written
    TOKENS_DELAY_S = 0.2  # and this long before the tokens are counted again

    @property
    def title_text(self) -> str:
        return self.memory_type.title.capitalize()  # "Short-term memory"

    def compose(self) -> ComposeResult:
        with Vertical(id="memory-editor") as box:
            box.border_title = f"Editing {self.title_text.lower()}"
            yield Static(Content(f"based on {_version(self.base)}"), id="editor-base")
            yield MemoryGauge(self.base.limit_chars, id="editor-gauge")
            with Horizontal(id="editor-conflict"):
                yield Static(Content(""), id="conflict-text")
                yield Button("View diff", id="view-diff", compact=True)
                yield Button("Keep theirs", id="keep-theirs", compact=True, variant="primary")
                yield Button("Overwrite", id="overwrite", compact=True, variant="error")
            # The soul and the task list are JSON documents (checked before anything is signed).
            yield _editor(self.base.content, "markdown" if self.memory_type in MEMORIES else "json")
            yield Static(Content(""), id="editor-result")
            with Horizontal(classes="pane-actions"):
                yield Button("Save", id="save", variant="primary", compact=True)
                yield Button("Close", id="close", compact=True)
        yield Footer()

    @property
    def text_area(self) -> TextArea:
        return self.query_one("#editor-text", TextArea)

    def on_mount(self) -> None:
        self.query_one("#editor-conflict").display = False
        self.query_one(MemoryGauge).show_text(self.base.content, self.base.limit_chars, self.base.max_bytes)
        self.text_area.focus()
        cast("DidactylHost", self.app).follow_service(self, self.on_service_event)
        self.restore_draft()
        self.count_tokens()

    @on(TextArea.Changed, "#editor-text")
    def _text_changed(self) -> None:
        self.query_one(MemoryGauge).show_text(self.text_area.text)
        if self._draft_timer is not None:
            self._draft_timer.stop()
        self._draft_timer = self.set_timer(self.DRAFT_DELAY_S, self.keep_draft)
        if self._token_timer is not None:
            self._token_timer.stop()
        self._token_timer = self.set_timer(self.TOKENS_DELAY_S, self.count_tokens)

    @work(exclusive=True, group="editor-tokens", exit_on_error=False)
    async def count_tokens(self) -> None:
        """The text's tokens for the model in use, against its context window: counted on a worker thread (a
        long memory takes milliseconds to tokenize), as the prompt inspector counts the memory in a prompt."""
        text = self.text_area.text
        model = self._model

        def measure() -> tuple[tuple[int, bool], int | None]:  # both may be a round trip to the model helper
            return model.count_tokens(text), model.ask_context_window()

        (tokens, estimated), window = await asyncio.to_thread(measure)
        if text == self.text_area.text:  # else a later count is on its way
            self.query_one(MemoryGauge).show_tokens(tokens, window, estimated=estimated)

    @property
    def unsaved(self) -> bool:
        return self.text_area.text != self.base.content

    # --- the draft: kept while typing, restored on reopening ------------------------------------------

    @property
    def _data_dir(self) -> Any:
        return cast("DidactylHost", self.app).data_dir

    @work(exclusive=True, group="editor-draft", exit_on_error=False)
    async def keep_draft(self) -> None:
        """The text as a 0600 draft file (a file: written off the UI loop); no draft once nothing is unsaved."""
        kind, limit = self.memory_type.value, self.base.limit_chars
        if self.unsaved:
            kept = await asyncio.to_thread(write_draft, self._data_dir, kind, self.text_area.text,
                                           self.base.event_id, limit)
            if not kept:
                self._show_result(Content.styled(
                    "Too long to keep as a draft (over twice the limit): save or shorten it.", "$text-warning"))
        else:
            await asyncio.to_thread(remove_draft, self._data_dir, kind)

    @work(group="editor-draft-read", exit_on_error=False)
    async def restore_draft(self) -> None:
        draft = await asyncio.to_thread(read_draft, self._data_dir, self.memory_type.value, self.base.limit_chars)
        if draft is None or draft.text == self.base.content or self.unsaved:
            return  # nothing to restore (or the user already typed: theirs wins)
        self.text_area.load_text(draft.text)
        self._show_result(Content.styled(
            f"Restored your unsaved draft from {when(draft.saved_at, CLOCK)}: save it, or Esc to discard it.",
            "$text-warning"))
        if draft.base_event_id != self.base.event_id:
            self.theirs = self.base  # the draft began from an older version: never overwrite the newer silently
            self.query_one("#conflict-text", Static).update(Content.assemble(
                ("Your draft was begun on an older version; the current one is ", "$text-warning"),
                f"{_version(self.base)}.",
            ))
            self.query_one("#editor-conflict").display = True

    # --- newer versions while editing ----------------------------------------------------------

    def on_service_event(self, event: ServiceEvent) -> None:
        if isinstance(event, DocumentChanged) and event.type == self.memory_type:
            if event.origin == "local" and self._saving_text is not None and not event.lost_local:
                return  # our own save (a soul comes back in its normal form, not as typed)
            self.consider_version(event.snapshot)

    def consider_version(self, snapshot: DocumentSnapshot) -> None:
        if snapshot.event_id is None or snapshot.event_id == self.base.event_id:
            return
        if self._saving_text is not None and snapshot.content == self._saving_text:
            return  # our own save coming back
        if snapshot.content == self.text_area.text:
            self._rebase(snapshot)  # same words: nothing to resolve
            return
        self.theirs = snapshot
        self.query_one("#conflict-text", Static).update(Content.assemble(
            ("A newer version arrived while you were editing ", "$text-warning"), f"({_version(snapshot)}).",
        ))
        self.query_one("#editor-conflict").display = True

    def _rebase(self, snapshot: DocumentSnapshot) -> None:
        self.base = snapshot
        self.query_one("#editor-base", Static).update(Content(f"based on {_version(snapshot)}"))

    def _resolve(self) -> DocumentSnapshot | None:
        theirs, self.theirs = self.theirs, None
        self.query_one("#editor-conflict").display = False
        if theirs is not None:
            self._rebase(theirs)
        return theirs

    async def action_view_diff(self) -> None:
        if self.theirs is None:
            return
        await self.app.push_screen(DiffScreen(
            self.theirs.content, self.text_area.text, title=f"{self.title_text}: theirs → yours",
            old_label=f"theirs ({_version(self.theirs)})", new_label="yours (unsaved)",
        ))

    def action_keep_theirs(self) -> None:
        theirs = self._resolve()
        if theirs is not None:
            self.text_area.load_text(clean(theirs.content))
            self._show_result(Content.styled("Kept their version; your edit was discarded.", "$text-muted"))

    def action_overwrite(self) -> None:
        if self._resolve() is not None:
            self.save()

    # --- saving ---------------------------------------------------------------------------------------

    def action_save(self) -> None:
        self.save()

    @work(exclusive=True, group="editor-save", exit_on_error=False)
    async def save(self, close_after: bool = False) -> None:
        if self.theirs is not None:
            self._show_result(Content.styled(
                "Not saved: a newer version arrived. View the diff, keep theirs, or overwrite.", "$text-warning"))
            return
        current = self._documents.snapshot(self.memory_type)
        if current.event_id != self.base.event_id:
            self.consider_version(current)
            if self.theirs is not None:
                self._show_result(Content.styled(
                    "Not saved: a newer version arrived. View the diff, keep theirs, or overwrite.",
                    "$text-warning"))
                return
        text = self.text_area.text
        self._saving_text = text
        self._show_result(Content.styled("Saving…", "$text-muted"))
        try:
            result = await self._documents.save(self.memory_type, text)
        except DidactylError as exc:  # bad input, a newer version, a remote signer that refused or signs as another
            self._show_result(Content.styled(f"Not saved: {exc.message}", "$text-error"))
            raise
        finally:
            self._saving_text = None
        assert result.snapshot is not None, "every save returns the snapshot it leaves (DocumentSync.save)"
        self._rebase(result.snapshot)
        if self.text_area.text == text != result.snapshot.content:
            self.text_area.load_text(clean(result.snapshot.content))  # the saved document in its normal form
        if self._show_outcome(result) and not self.unsaved:
            await asyncio.to_thread(remove_draft, self._data_dir, self.memory_type.value)
            if close_after:
                self.dismiss(None)

    @property
    def unsaved_change(self) -> str | None:
        """A line saying the editor holds text not saved yet (None when it holds the saved version)."""
        if self.text_area.text == clean(self.base.content):
            return None
        return f"your edit of the {self.title_text.lower()} in the editor is not saved"

    def _show_outcome(self, result: Any) -> bool:
        """The relays' verdicts, unless the version is on no relay and could not be written here (disk full):
        then it is not saved, and the screen says so with the reason (False: the draft stays)."""
        not_kept = self._documents.not_persisted(result.event_id)
        if not_kept and not result.any_accepted:
            line = (f"Not saved: {not_kept}. No relay took it either: it is kept only while didactyl runs, and "
                    "sent again meanwhile.")
            self._show_result(Content.styled(line, "$text-error"))
            self.app.notify(line, title="Not saved", severity="error", timeout=10)
            return False
        self._show_result(self._verdicts(result.outcome))
        if not_kept:
            self.app.notify(f"Saved on {len(result.outcome.accepted_by)} relay(s), but not on this device: {not_kept}.",
                       title="Not saved here", severity="warning", timeout=10)
        return True

    def _verdicts(self, outcome: PublishOutcome) -> Content:
        return verdict_lines(outcome, cast("DidactylHost", self.app).relay_label)

    def _show_result(self, content: Content) -> None:
        self.query_one("#editor-result", Static).update(content)

    # --- buttons and closing -------------------------------------------------------------------------------

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        actions = {"save": "save", "close": "close", "view-diff": "view_diff", "keep-theirs": "keep_theirs",
                   "overwrite": "overwrite"}
        if event.button.id in actions:
            await self.run_action(actions[event.button.id])

    async def action_close(self) -> None:
        if not self.unsaved:
            self._discard()
            return
        from .confirm import UnsavedChangesScreen

        # Awaited: keys typed behind the close key wait for the question (see ModelSwitchScreen's opener).
        await self.app.push_screen(UnsavedChangesScreen(self.title_text.lower()), self._close_answered)

    def _close_answered(self, choice: str | None) -> None:
        if choice == "save":
            self.save(close_after=True)
        elif choice == "discard":
            self._discard()

    def _discard(self) -> None:
        """Close, leaving memory as it is; the draft goes (written off the UI loop, after this screen)."""
        if self._draft_timer is not None:
            self._draft_timer.stop()
        app, data_dir, kind = self.app, self._data_dir, self.memory_type.value
        self.dismiss(None)
        app.run_worker(asyncio.to_thread(remove_draft, data_dir, kind), group="editor-draft-remove",
                       exit_on_error=False)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Worker.StateChanged does not bubble: hand this screen's worker errors to the app's one handler.
        cast("DidactylHost", self.app).on_worker_state_changed(event)
