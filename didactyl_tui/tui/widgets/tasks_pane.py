"""The task list in the memory tab: open tasks first, each with its status and note, live; buttons to edit the
list or see its history (the same editor and history screens as memory)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Button, Static

from ...terminal_text import one_line
from .memory_pane import MemoryPane, describe_source

if TYPE_CHECKING:
    from ...service.types import DocumentSnapshot, Task, TaskList

TASKS = "tasks"
STATUS_MARK = {"open": "○", "in_progress": "◐", "done": "●", "cancelled": "✕"}


def task_lines(tasks: TaskList) -> Content:
    """Open (and in-progress) tasks first, then the finished ones; ``○ #3 title · open — note`` a task."""
    ordered = sorted(tasks.tasks, key=lambda t: (not t.is_open, t.id))
    if not ordered:
        return Content("")
    return Content("\n").join(_line(t) for t in ordered)


def _line(task: Task) -> Content:
    style = "" if task.is_open else "$text-muted"
    parts: list[Content | tuple[str, str] | str] = [
        (f"{STATUS_MARK.get(task.status, '?')} #{task.id} ", style),
        (one_line(task.title), style),  # text from a relay: one line, no control characters
        (f" · {task.status.replace('_', ' ')}", "$text-muted"),
    ]
    if task.note:
        parts.append((f" — {one_line(task.note)}", "$text-muted"))
    return Content.assemble(*parts)


class TasksPane(Vertical):
    """Shows the agent's tasks. The screen calls :meth:`show_tasks`; Edit and History post the memory pane's
    requests (``memory_type = "tasks"``), so one editor and one history serve every self-document."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="memory-pane")
        self.memory_type = TASKS
        self.border_title = "Tasks"
        self.border_subtitle = "starting…"

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="memory-scroll"):
            yield Static(Content("(loading…)"), classes="memory-content -placeholder", id="task-lines")
        with Horizontal(classes="pane-actions"):
            yield Button("Edit", id="edit", compact=True, disabled=True)
            yield Button("History", id="history", compact=True, disabled=True)

    def show_tasks(self, tasks: TaskList, snapshot: DocumentSnapshot) -> None:
        open_count = len(tasks.open_tasks())
        self.border_title = f"Tasks ({open_count} open)" if tasks.tasks else "Tasks"
        self.border_subtitle = describe_source(snapshot)
        body = self.query_one("#task-lines", Static)
        lines = task_lines(tasks)
        body.update(lines if tasks.tasks else Content("(no tasks yet)"))
        body.set_class(not tasks.tasks, "-placeholder")
        self.query_one("#edit", Button).disabled = False
        self.query_one("#history", Button).disabled = False

    def show_unavailable(self, reason: str) -> None:
        """The tasks cannot be shown or edited here (attached without the agent's key): the reason, nothing to
        press."""
        self.border_subtitle = "not available here"
        body = self.query_one("#task-lines", Static)
        body.update(Content(reason))
        body.set_class(True, "-placeholder")
        for button in self.query(Button):
            button.disabled = True

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "edit":
            self.post_message(MemoryPane.EditRequested(TASKS))
        elif event.button.id == "history":
            self.post_message(MemoryPane.HistoryRequested(TASKS))
