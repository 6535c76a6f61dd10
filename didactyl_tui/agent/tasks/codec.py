"""The task list as a document: kind 30078 ``d = tasks`` (docs/tasks.md)."""

from __future__ import annotations

from ...nostr.event import Event
from ..documents.codec import DocumentCodec, DocumentError, Encoded
from ..documents.keys import DocumentKey
from .task_list import MAX_TASKS_BYTES, TaskError, TaskList


class TasksCodec(DocumentCodec[TaskList]):
    """Kind 30078 ``d = tasks``: the ``didactyl-tasks/1`` JSON (docs/tasks.md); edited one task a line."""

    key = DocumentKey.TASKS
    limit_chars = MAX_TASKS_BYTES

    def empty(self) -> TaskList:
        return TaskList()

    def from_text(self, text: str, current: TaskList, now: int) -> TaskList:
        try:
            return TaskList.from_json(text).touched(current, now)
        except TaskError as exc:
            raise DocumentError(exc.message.replace("the stored task list", "the task list"), "Tasks") from None

    def to_text(self, value: TaskList) -> str:
        return value.to_text()

    def encode(self, value: TaskList) -> Encoded:
        try:
            return Encoded(value.to_json())
        except TaskError as exc:
            raise DocumentError(exc.message, "Tasks") from None

    def decode(self, plaintext: str, ev: Event) -> TaskList:
        try:
            return TaskList.from_json(plaintext)
        except TaskError as exc:
            raise DocumentError(f"{self.where(ev)}: {exc.message}", "Tasks") from None
