"""The agent's task list: a small, bounded list of tasks stored as one kind 30078 event (``d = tasks``).

:class:`TaskList` is a pure value (every change returns a new list); :class:`TaskBook` holds the current
list and changes it through injected ``load``/``save`` callables, so the service can route saves through
the memory save path (outbox, history, conflicts). A change is applied to a copy, checked against the
bounds, saved, and only then becomes current: a failed save changes nothing.

Stored form (plaintext, before NIP-44 to self)::

    {"format": "didactyl-tasks/1", "next_id": 4,
     "tasks": [{"id": 1, "title": "…", "status": "open", "note": "", "created_at": 0, "updated_at": 0}]}

Ids are small integers that are never reused, so the model can say ``task_update(id=3, …)``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from ..errors import AgentError, NostrError
from ..nostr import nip44
from ..nostr.event import Event, sign_event
from ..nostr.keys import SecretKey
from ..nostr.kinds import APP_DATA
from .memory.lineage import prev_tags

TASKS_FORMAT = "didactyl-tasks/1"
TASKS_D_TAG = "tasks"
APP_TAG = ("app", "didactyl")
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


def _is_int(value: Any) -> bool:
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


# --- the Nostr form: kind 30078, d=tasks, NIP-44 to self ------------------------------------------


def build_tasks_event(sk: SecretKey, tasks: TaskList, *, created_at: int, nonce: bytes | None = None,
                      base: str | None = None) -> Event:
    """``base``: the version this list was changed from (``["prev", id]``, as memory's)."""
    key = nip44.get_conversation_key(sk.secret_hex(), sk.public_key_hex)
    return sign_event(sk, kind=APP_DATA, content=nip44.encrypt(tasks.to_json(), key, nonce),
                      created_at=created_at, tags=[["d", TASKS_D_TAG], list(APP_TAG), *prev_tags(base)])


def read_tasks_event(ev: Event, sk: SecretKey) -> TaskList:
    """Check (kind, author, d, id, signature) and decrypt a stored task list."""
    where = f"task list event {ev.id[:12]}"
    if ev.kind != APP_DATA or ev.d_tag != TASKS_D_TAG or ev.pubkey != sk.public_key_hex:
        raise TaskError(f"{where} is not this agent's kind {APP_DATA} d={TASKS_D_TAG} event")
    try:
        ev.check()
        text = nip44.decrypt(ev.content, nip44.get_conversation_key(sk.secret_hex(), sk.public_key_hex))
    except NostrError as exc:
        raise TaskError(f"{where}: {exc.message}") from None
    return TaskList.from_json(text)


def tasks_filter(pubkey: str) -> dict[str, Any]:
    return {"kinds": [APP_DATA], "authors": [pubkey], "#d": [TASKS_D_TAG]}


# --- the book: current list + injected storage ------------------------------------------------------

LoadTasks = Callable[[], Awaitable[TaskList | None]]
SaveTasks = Callable[[TaskList], Awaitable[object]]


def event_storage(sk: SecretKey, fetch: Callable[[], Awaitable[Event | None]],
                  publish: Callable[[Event], Awaitable[object]], *,
                  clock: Callable[[], float] = time.time,
                  base: Callable[[], str | None] = lambda: None) -> tuple[LoadTasks, SaveTasks]:
    """``load``/``save`` over the Nostr form: ``fetch`` returns the newest stored event (or None),
    ``publish`` sends a signed one (the service passes its memory save path here), ``base`` names the version
    a change starts from (its ``prev`` tag)."""
    last = [0]

    async def load() -> TaskList | None:
        ev = await fetch()
        if ev is None:
            return None
        last[0] = max(last[0], ev.created_at)
        return await asyncio.to_thread(read_tasks_event, ev, sk)  # decrypting: off the loop (the UI shares it)

    async def save(tasks: TaskList) -> object:
        created_at = max(int(clock()), last[0] + 1)  # each version strictly newer than the last
        ev = await asyncio.to_thread(build_tasks_event, sk, tasks, created_at=created_at, base=base())
        result = await publish(ev)
        last[0] = created_at
        return result

    return load, save


class TaskBook:
    """The agent's current tasks. Changes are serialized and saved before they become current."""

    def __init__(self, load: LoadTasks, save: SaveTasks, *, clock: Callable[[], float] = time.time) -> None:
        self._load, self._save, self._clock = load, save, clock
        self._tasks = TaskList()
        self._lock = asyncio.Lock()
        self.loaded = False

    @property
    def current(self) -> TaskList:
        return self._tasks

    async def refresh(self) -> TaskList:
        async with self._lock:
            stored = await self._load()
            self._tasks = stored if stored is not None else TaskList()
            self.loaded = True
            return self._tasks

    async def _change(self, apply: Callable[[TaskList, int], tuple[TaskList, Task]]) -> Task:
        async with self._lock:
            new_list, task = apply(self._tasks, int(self._clock()))
            new_list.to_json()  # the size bound, before anything is saved
            await self._save(new_list)
            self._tasks = new_list
            return task

    def adopt(self, tasks: TaskList) -> None:
        """A newer list from another writer (read and checked by the caller) is the list from now on."""
        self._tasks, self.loaded = tasks, True

    async def replace(self, tasks: TaskList) -> Any:
        """The whole list, as edited in the app: checked, saved, then current (a failed save changes nothing).
        Returns what the save gave (the service's publish outcome)."""
        async with self._lock:
            tasks.to_json()  # the size bound, before anything is saved
            result = await self._save(tasks)
            self._tasks = tasks
            return result

    async def add(self, title: str, note: str = "") -> Task:
        return await self._change(lambda tl, now: tl.add(title, note=note, now=now))

    async def update(self, task_id: int, *, status: str | None = None, note: str | None = None,
                     title: str | None = None) -> Task:
        return await self._change(lambda tl, now: tl.update(task_id, now=now, status=status, note=note, title=title))

    async def remove(self, task_id: int) -> Task:
        return await self._change(lambda tl, now: tl.remove(task_id))
