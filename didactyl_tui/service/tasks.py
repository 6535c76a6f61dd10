"""The agent's task list as a service part: a :class:`TaskBook` over its kind 30078 ``d = tasks`` event,
read from the relays at start and saved through the memory publisher (outbox first, then every relay,
retried while unsent; a version older than one already known is refused), like memory. Versions, history and
other writers' changes (live) are service/self_documents.py's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..agent.tasks import TaskBook, TaskError, TaskList, event_storage, tasks_filter
from ..nostr.event import Event
from ..nostr.replaceable import newest
from ..nostr.results import PublishOutcome
from .runtime import Runtime


def build_task_book(rt: Runtime, clock: Callable[[], float], *,
                    publish: Callable[[Event], Awaitable[PublishOutcome]] | None = None,
                    base: Callable[[], str | None] = lambda: None,
                    loaded: Callable[[Event], Awaitable[None]] | None = None) -> TaskBook:
    """``publish``: the one publish of a new version (default: the memory publisher); ``base``: the version a
    change starts from; ``loaded``: told of the version read from the relays."""
    me = rt.key.public_key_hex

    async def fetch() -> Event | None:
        events = await rt.pool.query([tasks_filter(me)], timeout=rt.timeout_s)
        found = newest(ev for ev in events if ev.pubkey == me)
        if found is not None and loaded is not None:
            await loaded(found)
        return found

    load, save = event_storage(rt.key, fetch, publish or rt.publisher.publish, clock=clock, base=base)
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
