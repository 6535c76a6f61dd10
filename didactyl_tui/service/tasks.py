"""The agent's task list as a service part: a :class:`TaskBook` over its kind 30078 ``d = tasks`` event,
read from the relays at start and saved through the memory publisher (outbox first, then every relay,
retried while unsent; a version older than one already known is refused), like memory."""

from __future__ import annotations

from collections.abc import Callable

from ..agent.tasks import TaskBook, TaskError, TaskList, event_storage, tasks_filter
from ..nostr.event import Event
from ..nostr.replaceable import newest
from .runtime import Runtime


def build_task_book(rt: Runtime, clock: Callable[[], float]) -> TaskBook:
    me = rt.key.public_key_hex

    async def fetch() -> Event | None:
        events = await rt.pool.query([tasks_filter(me)], timeout=rt.timeout_s)
        return newest(ev for ev in events if ev.pubkey == me)

    load, save = event_storage(rt.key, fetch, rt.publisher.publish, clock=clock)
    return TaskBook(load, save, clock=clock)


async def load_tasks(book: TaskBook, warn: Callable[[str], None]) -> TaskList:
    """The stored list (empty when there is none); relay trouble or an unreadable event is a warning."""
    try:
        return await book.refresh()
    except TaskError as exc:
        warn(f"the task list was not loaded: {exc.message}")
    except Exception as exc:  # relay trouble never raises out of start()
        warn(f"the task list was not loaded: {exc}")
    return book.current


def follow_tasks(rt: Runtime, book: TaskBook, warn: Callable[[str], None], now: int) -> None:
    """Another device's change to the list (a newer ``d = tasks`` event) reloads it while we run."""
    me = rt.key.public_key_hex
    newest_seen = [now]

    def arrived(url: str, ev: Event) -> None:
        if ev.pubkey != me or ev.created_at <= newest_seen[0]:
            return
        newest_seen[0] = ev.created_at
        rt.daemons.spawn(load_tasks(book, warn))

    sub = rt.pool.subscribe([{**tasks_filter(me), "since": now}], arrived)
    rt.closers.push_async_callback(sub.close)
