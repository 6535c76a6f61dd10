"""Reading stored events back in time, a page at a time, each relay on its own cursor; bounded in pages, bytes and
time.

A relay answers a filter with its newest ``limit`` events: whoever can publish many newer events matching it (gift
wraps addressed to someone, say) fills that limit, and what the reader looks for is never sent. Paging walks back
instead (NIP-01 ``until``): each relay's next page ends where its last page reached, so every relay is read as far
back as the bounds allow, whatever the others hold. The caller reads each page's new events and stops when it has
what it wants; the read stops by itself at its bounds (:class:`PageBounds`) and says which one ended it.

Ties: ``until`` is inclusive, so a page that ends inside a second is asked again from that second; a relay that
holds more than a page of events dated within one second is read up to a page of them, then the read moves to the
second before (paging cannot reach the rest).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .event import Event
from .pool import RelayPool

# Why a read ended (``PagedRead.ended``).
COMPLETE = "complete"  # every relay was read to its oldest event, or stopped answering (``unanswered``)
PAGES = "pages"
BYTES = "bytes"
TIME = "time"
NO_BOUND = 2**63 - 1  # a page's horizon while a relay has not answered a page yet: its unread events may be any date


@dataclass(frozen=True, slots=True)
class PageBounds:
    """How far a paged read may go: ``page_size`` events per relay per page, at most ``max_pages`` rounds (each
    asks every relay still being read for one page), ``max_bytes`` of events from all relays together, and
    ``timeout_s`` for the whole read."""

    page_size: int = 500
    max_pages: int = 40
    max_bytes: int = 64 * 1024 * 1024
    timeout_s: float = 30.0


@dataclass(slots=True)
class Page:
    """One round: the events no earlier page held (deduped across relays), newest first, and ``horizon``: every
    event still unread on a relay being read is dated at or before it (None when no relay is left to read;
    :data:`NO_BOUND` while one has not answered yet)."""

    events: list[Event]
    horizon: int | None


@dataclass(slots=True)
class _Cursor:
    until: int | None = None  # the next page ends here (None: the newest)
    done: bool = False


@dataclass
class PagedRead:
    """One read back over ``pool`` for ``filter`` (its ``until`` and ``limit`` are the read's; ``since`` is kept as
    the floor). Iterate :meth:`pages`; afterwards ``ended`` says why it stopped ("" when the caller stopped first),
    ``answered`` which relays answered at least one page, ``unanswered`` which stopped answering (not connected,
    closed, their own timeout: left unread from there)."""

    pool: RelayPool
    filter: Mapping[str, Any]
    bounds: PageBounds = field(default_factory=PageBounds)
    query_timeout_s: float = 5.0  # one page from one relay
    ended: str = ""
    pages_read: int = 0
    bytes_read: int = 0
    answered: set[str] = field(default_factory=set)
    unanswered: set[str] = field(default_factory=set)

    async def pages(self) -> AsyncIterator[Page]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.bounds.timeout_s
        cursors = {url: _Cursor() for url in self.pool.urls}
        seen: set[str] = set()
        while True:
            reading = [url for url, cursor in cursors.items() if not cursor.done]
            if not reading:
                self.ended = COMPLETE
                return
            if self.pages_read >= self.bounds.max_pages:
                self.ended = PAGES
                return
            if self.bytes_read >= self.bounds.max_bytes:
                self.ended = BYTES
                return
            left = deadline - loop.time()
            if left <= 0:
                self.ended = TIME
                return
            share = max(1, (self.bounds.max_bytes - self.bytes_read) // len(reading))
            answers = await asyncio.gather(*(self._page(url, cursors[url], deadline, share) for url in reading))
            self.pages_read += 1
            fresh: dict[str, Event] = {}
            for events in answers:
                for ev in events:
                    if ev.id not in seen:
                        seen.add(ev.id)
                        fresh[ev.id] = ev
            live = [cursors[url].until for url in reading if not cursors[url].done]
            horizon = max(NO_BOUND if until is None else until for until in live) if live else None
            yield Page(sorted(fresh.values(), key=lambda ev: (-ev.created_at, ev.id)), horizon)

    async def _page(self, url: str, cursor: _Cursor, deadline: float, max_bytes: int) -> list[Event]:
        """One page from one relay; moves its cursor (or marks it done) and counts its bytes."""
        loop = asyncio.get_running_loop()
        flt: dict[str, Any] = {**self.filter, "limit": self.bounds.page_size}
        if cursor.until is not None:
            flt["until"] = cursor.until
        timeout = max(0.0, min(deadline - loop.time(), self.query_timeout_s))
        result = (await self.pool.query_results([flt], timeout, urls=[url], max_bytes=max_bytes))[url]
        self.bytes_read += sum(ev.approx_bytes() for ev in result.events)
        if result.cut:  # the byte bound is reached: the read ends after this round
            self.bytes_read = max(self.bytes_read, self.bounds.max_bytes)
        if result.complete or result.events or result.cut:
            self.answered.add(url)
        if not result.events:
            if result.complete:
                cursor.done = True  # nothing older here
            elif not result.cut and loop.time() < deadline:
                cursor.done = True  # the relay did not answer: read no further there
                self.unanswered.add(url)
            return result.events  # (else a bound is reached: the caller ends the read)
        # A relay sends its newest first, so even a cut answer ends at its oldest event. ``until`` is inclusive: the
        # oldest second is asked again (the page may end inside it), unless the page reached no further back than
        # the cursor already was; then the read steps past that second. The cursor only moves back: the read ends.
        oldest = min(ev.created_at for ev in result.events)
        cursor.until = oldest if cursor.until is None or oldest < cursor.until else cursor.until - 1
        if cursor.until < int(self.filter.get("since", 0)):
            cursor.done = True
        return result.events
