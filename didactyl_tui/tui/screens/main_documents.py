"""The documents in the main screen's sidebar: both memories' panes and the tasks pane as they stand, each
document's editor and history (the soul's from the palette), long-term memory loaded from the relays.

A part the main screen owns (:class:`DocumentPanes`), handed the screen it shows on; its one state is the
service's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .part_work import work_on_screen

if TYPE_CHECKING:
    from ...service.types import DocumentKey, DocumentSnapshot
    from .main_view import MainView

SHORT, LONG = "short_term", "long_term"
SOUL, TASKS = "soul", "tasks"  # versioned like memory: the same editor, history and merge view
DOCUMENT_NAMES = {SHORT: "Short-term memory", LONG: "Long-term memory", SOUL: "The soul", TASKS: "The tasks"}


def document_key(name: str) -> DocumentKey:
    """The view's name of a document as the service's key (the edge: the service takes keys, never names)."""
    from ...service.types import DocumentKey

    return DocumentKey.parse(name)


class DocumentPanes:
    def __init__(self, screen: MainView) -> None:
        self.screen = screen

    def show_documents(self) -> None:
        """Both memories and the tasks as they stand, or why they cannot be shown here."""
        service = self.screen.require_service()
        unavailable = service.documents.unavailable
        for memory_type in (SHORT, LONG):
            pane = self.screen.memory_pane(memory_type)
            if unavailable:
                pane.show_unavailable(unavailable)
            else:
                pane.show_snapshot(service.documents.snapshot(document_key(memory_type)))
        self.show_tasks()

    def _unavailable(self, what: str) -> bool:
        """Attached without the agent's key: say so (not "no relay answered") and do nothing."""
        service = self.screen.service_or_notify()
        reason = service.documents.unavailable if service is not None else None
        if reason:
            self.screen.notify(f"{what}: {reason}", title="Agent key elsewhere", severity="warning", markup=False)
        return service is None or reason is not None

    def show_document(self, memory_type: str, snapshot: DocumentSnapshot) -> None:
        """A memory's pane, or the tasks pane (the soul has no pane: its editor and history are in the palette)."""
        if memory_type == TASKS:
            self.show_tasks()
        elif memory_type in (SHORT, LONG):
            self.screen.memory_pane(memory_type).show_snapshot(snapshot)

    def show_tasks(self) -> None:
        service = self.screen.didactyl.service
        if service is None or not self.screen.didactyl.service_ready:
            return
        from ..widgets.tasks_pane import TasksPane

        for pane in self.screen.query(TasksPane):
            if service.documents.unavailable:
                pane.show_unavailable(service.documents.unavailable)
            else:
                tasks = document_key(TASKS)
                pane.show_tasks(service.documents.value(tasks), service.documents.snapshot(tasks))

    def open_history(self, memory_type: str) -> None:
        from .memory_history import MemoryHistoryScreen

        if self._unavailable(DOCUMENT_NAMES.get(memory_type, memory_type)):
            return
        service = self.screen.require_service()
        self.screen.app.push_screen(MemoryHistoryScreen(memory_type, service.documents))

    def offer_load_long_term(self) -> None:
        if not self._unavailable(DOCUMENT_NAMES[LONG]):
            self.load_long_term()

    @work_on_screen(exclusive=True, group="memory")
    async def load_long_term(self, then_edit: bool = False) -> None:
        service = self.screen.require_service()
        pane = self.screen.memory_pane(LONG)
        pane.show_loading()
        try:
            snapshot = await service.documents.load_long_term()
        finally:
            pane.show_snapshot(service.documents.snapshot(document_key(LONG)))
        if then_edit and snapshot.loaded:
            self.open_editor(LONG)
        elif not snapshot.loaded:
            self.screen.notify("No relay answered; long-term memory is not loaded.", title="Long-term memory",
                               severity="warning")

    def open_editor(self, memory_type: str) -> None:
        from .memory_editor import MemoryEditorScreen

        name = DOCUMENT_NAMES.get(memory_type, memory_type)
        if self._unavailable(name):
            return
        service = self.screen.require_service()
        snapshot = service.documents.snapshot(document_key(memory_type))
        if not snapshot.loaded:
            if memory_type == LONG:
                self.load_long_term(then_edit=True)
            else:
                self.screen.notify(f"{name} is not loaded yet (no relay answered).", title="Memory", severity="warning")
            return
        self.screen.app.push_screen(MemoryEditorScreen(snapshot, service.documents, service.model))
