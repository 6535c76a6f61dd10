"""The main screen's sidebar side: panes, memory (edit, load, history), the prompt inspector, the last reply.

A part of :class:`MainScreen` (it inherits this), kept apart so each file reads in one sitting.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work

if TYPE_CHECKING:
    from ...service.types import DocumentKey, DocumentSnapshot
    from ..widgets.memory_pane import MemoryPane
    from ..widgets.prompt_inspector import PromptInspector

if TYPE_CHECKING:  # the screen's state, as each part uses it: declared for the type checker (main_state.py)
    from .main_state import MainScreenState
else:
    MainScreenState = object

SHORT, LONG = "short_term", "long_term"
SOUL, TASKS = "soul", "tasks"  # versioned like memory: the same editor, history and merge view
DOCUMENT_NAMES = {SHORT: "Short-term memory", LONG: "Long-term memory", SOUL: "The soul", TASKS: "The tasks"}


def document_key(name: str) -> DocumentKey:
    """The view's name of a document as the service's key (the edge: the service takes keys, never names)."""
    from ...service.types import DocumentKey

    return DocumentKey.parse(name)


class SidebarActions(MainScreenState):
    """A part of MainScreen: what it uses of the screen is declared in main_state.py."""

    # --- the status the panes show, read off the UI loop ---------------------------------------------------

    @work(exclusive=True, group="dm-status", exit_on_error=False)
    async def show_dm_status(self) -> None:
        """The DM ledger is SQLite: read on a worker thread by the service, never on the UI loop."""
        dm = self.require_service().dm
        status = await dm.status() if dm is not None else None
        for self_pane in self.self_panes():
            self_pane.show_dm_status(status.summary() if status is not None else None,
                                     status.given_up if status is not None else [])

    @work(exclusive=True, group="pending", exit_on_error=False)
    async def count_pending(self) -> None:
        """The outbox is SQLite: counted on a worker thread, never on the UI loop."""
        self.status.pending_publishes = len(await self.require_service().documents.pending_publishes())

    # --- panes ----------------------------------------------------------------------------------------------

    def _toggle_pane(self, pane_id: str) -> None:
        slot = self.query_one("#sidebar-slot")
        if not self.query("#sidebar"):
            return  # not mounted yet (the first instants)
        if slot.display and self.sidebar.active == pane_id:
            self.set_focus(self.chat_input)
            slot.display = False
        else:
            self.show_pane(pane_id)

    def show_pane(self, pane_id: str) -> None:
        self.query_one("#sidebar-slot").display = True
        if not self.query("#sidebar"):
            return
        focused = self.focused
        if focused is not None and self.sidebar in focused.ancestors and self.sidebar.active != pane_id:
            # Focus inside the pane being hidden would move to its next widget, and the tabs bring back the
            # pane that holds the focus (F2/F3 from the inspector tree did nothing): focus the input first.
            self.set_focus(self.chat_input)
        self.sidebar.active = pane_id

    def action_toggle_memory(self) -> None:
        self._toggle_pane("memory")

    def action_toggle_self(self) -> None:
        self._toggle_pane("self")

    def action_toggle_inspector(self) -> None:
        self._toggle_pane("inspector")

    def fit_sidebar(self, width: int) -> None:
        """Hide the sidebar when the terminal becomes narrow, show it again when it becomes wide; in between,
        the user's F2/F3/F4/ctrl+b choices stand."""
        narrow = width < self.config.ui.sidebar_below_columns
        if narrow == self._narrow:
            return
        self._narrow = narrow
        slot = self.query_one("#sidebar-slot")
        if narrow and self.focused is not None and slot in self.focused.ancestors:
            self.set_focus(self.chat_input)
        slot.display = not narrow

    def action_toggle_sidebar(self) -> None:
        slot = self.query_one("#sidebar-slot")
        if slot.display and self.focused is not None and slot in self.focused.ancestors:
            self.set_focus(self.chat_input)
        slot.display = not slot.display

    # --- memory ------------------------------------------------------------------------------------------------

    def on_memory_pane_edit_requested(self, message: MemoryPane.EditRequested) -> None:
        self.open_editor(message.memory_type)

    def on_memory_pane_load_requested(self, message: MemoryPane.LoadRequested) -> None:
        self.load_long_term()

    def on_memory_pane_history_requested(self, message: MemoryPane.HistoryRequested) -> None:
        self.open_history(message.memory_type)

    def show_documents(self) -> None:
        """Both memories and the tasks as they stand, or why they cannot be shown here."""
        service = self.require_service()
        unavailable = service.documents.unavailable
        for memory_type in (SHORT, LONG):
            pane = self.memory_pane(memory_type)
            if unavailable:
                pane.show_unavailable(unavailable)
            else:
                pane.show_snapshot(service.documents.snapshot(document_key(memory_type)))
        self.show_tasks()

    def _unavailable(self, what: str) -> bool:
        """Attached without the agent's key: say so (not "no relay answered") and do nothing."""
        service = self._service_or_notify()
        reason = service.documents.unavailable if service is not None else None
        if reason:
            self.notify(f"{what}: {reason}", title="Agent key elsewhere", severity="warning", markup=False)
        return service is None or reason is not None

    def show_document(self, memory_type: str, snapshot: DocumentSnapshot) -> None:
        """A memory's pane, or the tasks pane (the soul has no pane: its editor and history are in the palette)."""
        if memory_type == TASKS:
            self.show_tasks()
        elif memory_type in (SHORT, LONG):
            self.memory_pane(memory_type).show_snapshot(snapshot)

    def show_tasks(self) -> None:
        service = self.didactyl.service
        if service is None or not self.didactyl.service_ready:
            return
        from ..widgets.tasks_pane import TasksPane

        for pane in self.query(TasksPane):
            if service.documents.unavailable:
                pane.show_unavailable(service.documents.unavailable)
            else:
                tasks = document_key(TASKS)
                pane.show_tasks(service.documents.value(tasks), service.documents.snapshot(tasks))

    def action_edit_soul(self) -> None:
        self.open_editor(SOUL)

    def action_history_soul(self) -> None:
        self.open_history(SOUL)

    def action_edit_tasks(self) -> None:
        self.open_editor(TASKS)

    def action_history_tasks(self) -> None:
        self.open_history(TASKS)

    def action_history_short_term(self) -> None:
        self.open_history(SHORT)

    def action_history_long_term(self) -> None:
        self.open_history(LONG)

    def open_history(self, memory_type: str) -> None:
        from .memory_history import MemoryHistoryScreen

        if self._unavailable(DOCUMENT_NAMES.get(memory_type, memory_type)):
            return
        service = self.require_service()
        self.app.push_screen(MemoryHistoryScreen(memory_type, service.documents))

    def action_edit_short_term(self) -> None:
        self.open_editor(SHORT)

    def action_edit_long_term(self) -> None:
        self.open_editor(LONG)

    def action_load_long_term(self) -> None:
        if not self._unavailable(DOCUMENT_NAMES[LONG]):
            self.load_long_term()

    @work(exclusive=True, group="memory", exit_on_error=False)
    async def load_long_term(self, then_edit: bool = False) -> None:
        service = self.require_service()
        pane = self.memory_pane(LONG)
        pane.show_loading()
        try:
            snapshot = await service.documents.load_long_term()
        finally:
            pane.show_snapshot(service.documents.snapshot(document_key(LONG)))
        if then_edit and snapshot.loaded:
            self.open_editor(LONG)
        elif not snapshot.loaded:
            self.notify("No relay answered; long-term memory is not loaded.", title="Long-term memory",
                        severity="warning")

    def open_editor(self, memory_type: str) -> None:
        from .memory_editor import MemoryEditorScreen

        name = DOCUMENT_NAMES.get(memory_type, memory_type)
        if self._unavailable(name):
            return
        service = self.require_service()
        snapshot = service.documents.snapshot(document_key(memory_type))
        if not snapshot.loaded:
            if memory_type == LONG:
                self.load_long_term(then_edit=True)
            else:
                self.notify(f"{name} is not loaded yet (no relay answered).", title="Memory", severity="warning")
            return
        self.app.push_screen(MemoryEditorScreen(snapshot, service.documents, service.model))

    # --- identity drift ----------------------------------------------------------------------------------------

    def on_self_pane_adopt_requested(self) -> None:
        self.resolve_identity_drift(adopt=True)

    def on_self_pane_republish_requested(self) -> None:
        self.resolve_identity_drift(adopt=False)

    @work(exclusive=True, group="identity", exit_on_error=False)
    async def resolve_identity_drift(self, adopt: bool) -> None:
        service = self.require_service()
        if adopt:
            kinds = await service.identity.adopt()
            self.notify(f"Kept the relays' version ({len(kinds)} kind{'s' if len(kinds) != 1 else ''}).",
                        title="Identity")
        else:
            outcomes = await service.identity.republish_merged()
            summary = "; ".join(o.summary() for o in outcomes.values()) or "nothing to publish"
            self.notify(f"Republished with config.toml's fields merged: {summary}", title="Identity")
        self.refresh_self()

    # --- prompt inspector ----------------------------------------------------------------------------------------

    def action_dry_run(self) -> None:
        self.run_dry_run()

    def on_prompt_inspector_dry_run_requested(self) -> None:
        self.run_dry_run()

    @work(exclusive=True, group="dry_run", exit_on_error=False)
    async def run_dry_run(self) -> None:
        service = self.require_service()
        prompt = service.prompt
        if prompt is None:  # attached: the agent's prompt comes with each of its replies
            from ...service.conversation import PROMPT_ELSEWHERE

            self.notify(PROMPT_ELSEWHERE, title="Attached", severity="warning", timeout=8, markup=False)
            return
        self.model_needed()  # its tokenizer counts the prompt: the status bar says while the helper loads
        if self.session_id is None:
            self.session_id = await service.chat.new_session()
        text = self.chat_input.text.strip() or None
        assembly = await prompt.dry_run(self.session_id, text)  # the inspector gets it as PromptAssembled
        self.show_pane("inspector")
        from ..widgets.assembly_tree import prompt_tokens

        self.status.prompt_tokens, self.status.tokens_estimated = prompt_tokens(assembly, None)
        self.status.context_window = service.model.context_window()

    def on_prompt_inspector_open_requested(self, message: PromptInspector.OpenRequested) -> None:
        from .inspector_detail import InspectorDetailScreen

        previous = self.inspector.previous_of(message.entry)
        self.app.push_screen(InspectorDetailScreen(message.entry, previous), self._detail_closed)

    def _detail_closed(self, result: str | None) -> None:
        if result == "dry_run":
            self.run_dry_run()

    async def on_prompt_inspector_diff_requested(self, message: PromptInspector.DiffRequested) -> None:
        from .inspector_detail import show_assembly_diff

        await show_assembly_diff(self, message.previous, message.entry)

    # --- reply and export ---------------------------------------------------------------------------------------------

    def action_copy_reply(self) -> None:
        reply = self.conversation.last_reply()
        if reply is None:
            self.notify("No reply to copy yet.", title="Copy")
            return
        self.app.copy_to_clipboard(reply)
        self.notify(f"Copied {len(reply):,} characters.", title="Copy")

    def action_export_markdown(self) -> None:
        self.export_markdown(self.conversation.as_markdown())

    @work(group="export", exit_on_error=False)
    async def export_markdown(self, text: str) -> None:
        folder = self.didactyl.data_dir / "exports"
        name = f"chat-{time.strftime('%Y%m%d-%H%M%S')}-{(self.session_id or 'new')[:8]}.md"
        path = await asyncio.to_thread(_write_export, folder / name, text)
        self.notify(str(path), title="Exported")




def _write_export(path: Path, text: str) -> Path:
    """The chat as a new file, 0600 in a 0700 folder (a chat is private), never over another file (a second
    export within the same second gets a number)."""
    from ...errors import AgentError

    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent, 0o700)  # a folder an older version made 0755
        for n in range(1, 1000):
            target = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            return target
    except OSError as exc:
        raise AgentError(f"cannot export to {path.parent}: {exc.strerror or exc}", "Export") from None
    raise AgentError(f"cannot export to {path.parent}: too many exports of this chat this second", "Export")
