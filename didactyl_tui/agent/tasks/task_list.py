"""The agent's task list: a small, bounded list of tasks stored as one kind 30078 event (``d = tasks``).

:class:`TaskList` is a pure value (every change returns a new list); :class:`TaskBook` is what the tools change
it through: the list is a document of the agent's (agent/documents: read, versioned, saved like memory). A change is
applied to a copy, checked against the bounds, saved, and only then becomes current: a failed save changes nothing.

Stored form (plaintext, before NIP-44 to self)::

    {"format": "didactyl-tasks/1", "next_id": 4,
     "tasks": [{"id": 1, "title": "…", "status": "open", "note": "", "created_at": 0, "updated_at": 0}]}

Ids are small integers that are never reused, so the model can say ``task_update(id=3, …)``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeGuard, get_args

from ...errors import AgentError

TASKS_FORMAT = "didactyl-tasks/1"
Status = Literal["open", "in_progress", "done", "cancelled"]
STATUSES: tuple[str, ...] = get_args(Status)
OPEN_STATUSES = ("open", "in_progress")
MAX_TASKS = 100
MAX_TITLE_CHARS = 200
MAX_NOTE_CHARS = 1000
MAX_TASKS_BYTES = 32_000  # the JSON, well inside NIP-44's 65,535 bytes; a full list costs ~8k tokens at most


class TaskError(AgentError):
    """A task change was refused (unknown id, bad status, over a limit) or the stored list is unreadable."""

    title = "Tasks"


@dataclass(frozen=True, slots=True)
class Task:
    id: int
    title: str
    status: str = "open"
    note: str = ""
    created_at: int = 0
    updated_at: int = 0

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "status": self.status, "note": self.note,
                "created_at": self.created_at, "updated_at": self.updated_at}


def _clean_title(title: Any) -> str:
    if not isinstance(title, str) or not title.strip():
        raise TaskError("a task needs a title")
    text = " ".join(title.split())
    if len(text) > MAX_TITLE_CHARS:
        raise TaskError(f"a task title is at most {MAX_TITLE_CHARS} characters, this one is {len(text)}")
    return text


def _clean_note(note: Any) -> str:
    if not isinstance(note, str):
        raise TaskError("a task note must be text")
    text = note.strip()
    if len(text) > MAX_NOTE_CHARS:
        raise TaskError(f"a task note is at most {MAX_NOTE_CHARS} characters, this one is {len(text)}")
    return text


def _clean_status(status: Any) -> str:
    if status not in STATUSES:
        raise TaskError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
    return str(status)


@dataclass(frozen=True, slots=True)
class TaskList:
    tasks: tuple[Task, ...] = ()
    next_id: int = 1

    # --- changes (each returns a new list) -------------------------------------------------
    def add(self, title: str, *, note: str = "", now: int) -> tuple[TaskList, Task]:
        if len(self.tasks) >= MAX_TASKS:
            raise TaskError(f"the task list is full ({MAX_TASKS} tasks): remove finished ones first")
        task = Task(self.next_id, _clean_title(title), "open", _clean_note(note), now, now)
        return TaskList((*self.tasks, task), self.next_id + 1), task

    def update(self, task_id: int, *, now: int, status: str | None = None, note: str | None = None,
               title: str | None = None) -> tuple[TaskList, Task]:
        old = self.get(task_id)
        if status is None and note is None and title is None:
            raise TaskError(f"nothing to change in task {task_id}: give a status, a note or a title")
        new = replace(
            old,
            status=_clean_status(status) if status is not None else old.status,
            note=_clean_note(note) if note is not None else old.note,
            title=_clean_title(title) if title is not None else old.title,
            updated_at=now,
        )
        return TaskList(tuple(new if t.id == task_id else t for t in self.tasks), self.next_id), new

    def remove(self, task_id: int) -> tuple[TaskList, Task]:
        old = self.get(task_id)
        return TaskList(tuple(t for t in self.tasks if t.id != task_id), self.next_id), old

    def touched(self, before: TaskList, now: int) -> TaskList:
        """This list as edited by hand from ``before``: a new task, or one whose title, status or note changed,
        is dated ``now`` (the model sees when a task last moved)."""
        old = {t.id: t for t in before.tasks}

        def dated(t: Task) -> Task:
            was = old.get(t.id)
            if was is None:
                return replace(t, created_at=t.created_at or now, updated_at=now)
            changed = (t.title, t.status, t.note) != (was.title, was.status, was.note)
            return replace(t, updated_at=now) if changed else t

        return TaskList(tuple(dated(t) for t in self.tasks), self.next_id)

    # --- reading ---------------------------------------------------------------------------
    def get(self, task_id: int) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        known = ", ".join(str(t.id) for t in self.tasks) or "none"
        raise TaskError(f"there is no task {task_id} (task ids: {known})")

    def open_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.is_open]

    def render_open(self) -> str:
        """The ``tasks`` prompt section: open tasks as a checklist; "" when none are open."""
        items = self.open_tasks()
        if not items:
            return ""
        lines = ["## Tasks (open)", ""]
        for t in items:
            state = " (in progress)" if t.status == "in_progress" else ""
            note = f" — {' '.join(t.note.split())}" if t.note else ""
            lines.append(f"- [ ] #{t.id} {t.title}{state}{note}")
        return "\n".join(lines)

    # --- storage form -----------------------------------------------------------------------
    def to_json(self) -> str:
        text = json.dumps({"format": TASKS_FORMAT, "next_id": self.next_id,
                           "tasks": [t.to_dict() for t in self.tasks]}, ensure_ascii=False, separators=(",", ":"))
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_TASKS_BYTES:
            raise TaskError(f"the task list would be {size:,} bytes, over its {MAX_TASKS_BYTES:,}-byte limit: "
                            "shorten notes or remove finished tasks")
        return text

    def to_text(self) -> str:
        """The editable form (the editor, history diffs): the same JSON, one task a line."""
        self.to_json()  # the size bound
        head = json.dumps({"format": TASKS_FORMAT, "next_id": self.next_id}, ensure_ascii=False)[:-1]
        rows = ",\n".join(" " + json.dumps(t.to_dict(), ensure_ascii=False) for t in self.tasks)
        return f'{head}, "tasks": [\n{rows}\n]}}\n' if rows else f'{head}, "tasks": []}}\n'

    @classmethod
    def from_json(cls, text: str) -> TaskList:
        """Parse and check a stored list; :class:`TaskError` says what is wrong."""
        if len(text.encode("utf-8", "surrogatepass")) > MAX_TASKS_BYTES:
            raise TaskError(f"the stored task list is over its {MAX_TASKS_BYTES:,}-byte limit")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise TaskError("the stored task list is not valid JSON") from None
        if not isinstance(data, dict) or data.get("format") != TASKS_FORMAT:
            raise TaskError(f"the stored task list is not a {TASKS_FORMAT} document")
        items, next_id = data.get("tasks"), data.get("next_id")
        if not isinstance(items, list) or len(items) > MAX_TASKS:
            raise TaskError(f"the stored task list must hold a list of at most {MAX_TASKS} tasks")
        tasks = tuple(_task_from(item, n) for n, item in enumerate(items, 1))
        ids = [t.id for t in tasks]
        if len(set(ids)) != len(ids):
            raise TaskError("the stored task list repeats a task id")
        if not _is_int(next_id) or next_id <= max(ids, default=0):
            raise TaskError("the stored task list has a bad next_id")
        return cls(tasks, next_id)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _task_from(item: Any, n: int) -> Task:
    if not isinstance(item, dict):
        raise TaskError(f"stored task #{n} is not an object")
    try:
        values = {k: item[k] for k in ("id", "title", "status", "note", "created_at", "updated_at")}
    except KeyError as exc:
        raise TaskError(f"stored task #{n} has no {exc.args[0]!r}") from None
    if not all(_is_int(values[k]) and values[k] >= 0 for k in ("id", "created_at", "updated_at")):
        raise TaskError(f"stored task #{n}: id and times must be non-negative integers")
    return Task(values["id"], _clean_title(values["title"]), _clean_status(values["status"]),
                _clean_note(values["note"]), values["created_at"], values["updated_at"])


# --- the book: the list in use, changed through the document model --------------------------------------


class TaskBook:
    """The agent's tasks, as its tools see them. The list is the task-list document (kind 30078 ``d = tasks``, read
    and versioned like every document: docs/sync.md); a change is computed on the list in use and published through
    the one save path before it counts (``change``: the document sync's ``update``), so a failed save changes
    nothing and a list that cannot be read is never changed as if it were empty."""

    def __init__(self, current: Callable[[], TaskList],
                 change: Callable[[Callable[[TaskList], TaskList]], Awaitable[object]], *,
                 clock: Callable[[], float] = time.time) -> None:
        self._current, self._change_list, self._clock = current, change, clock

    @property
    def current(self) -> TaskList:
        return self._current()

    async def _change(self, apply: Callable[[TaskList, int], tuple[TaskList, Task]]) -> Task:
        done: list[Task] = []

        def derive(tasks: TaskList) -> TaskList:
            new_list, task = apply(tasks, int(self._clock()))
            new_list.to_json()  # the size bound, before anything is saved
            done.append(task)
            return new_list

        await self._change_list(derive)
        return done[-1]

    async def add(self, title: str, note: str = "") -> Task:
        return await self._change(lambda tl, now: tl.add(title, note=note, now=now))

    async def update(self, task_id: int, *, status: str | None = None, note: str | None = None,
                     title: str | None = None) -> Task:
        return await self._change(lambda tl, now: tl.update(task_id, now=now, status=status, note=note, title=title))

    async def remove(self, task_id: int) -> Task:
        return await self._change(lambda tl, now: tl.remove(task_id))
