"""A live subscription on one relay, and the answer to a one-off query (used by relay.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .event import Event
from .filters import Filter
from .relay_guard import RecentIds

log = logging.getLogger(__name__)

EventCallback = Callable[[Event], None]


@dataclass(slots=True)
class QueryResult:
    """One relay's answer to a query. ``complete`` means the relay sent EOSE."""

    url: str
    events: list[Event] = field(default_factory=list)
    complete: bool = False
    reason: str = ""  # why it is not complete: not connected, timed out, closed by the relay, cut
    cut: bool = False  # ended at the query's byte bound (``max_bytes``): more was there


class SubscriptionOwner(Protocol):
    """What a subscription needs of the part of the relay client that keeps it (``relay_subscriptions.py``)."""

    @property
    def url(self) -> str: ...

    def forget_subscription(self, sub: Subscription, reason: str) -> None:
        """Stop re-sending ``sub`` (and send CLOSE when connected)."""


class Subscription:
    """A live REQ on one relay. Re-sent after every reconnect until :meth:`close`."""

    def __init__(
        self,
        client: SubscriptionOwner,
        sub_id: str,
        filters: list[Filter],
        on_event: EventCallback,
        on_eose: Callable[[], None] | None,
        on_closed: Callable[[str], None] | None,
        on_dropped: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.id = sub_id
        self.filters = filters
        self._on_event = on_event
        self._on_eose = on_eose
        self._on_closed = on_closed
        self._on_dropped = on_dropped
        self._seen = RecentIds()
        self.eose_received = False
        self.closed_reason: str | None = None  # set when the relay sent CLOSED (or we closed it)
        self._settled = asyncio.Event()  # EOSE or CLOSED arrived

    @property
    def active(self) -> bool:
        return self.closed_reason is None

    async def close(self) -> None:
        """Stop the subscription (sends CLOSE when connected). Idempotent."""
        self.client.forget_subscription(self, "closed by us")

    def seen(self, event_id: str) -> bool:
        """This event was delivered already (a repeat needs no check)."""
        return event_id in self._seen

    def settle(self) -> None:
        """End :meth:`wait_settled` without EOSE (a query that has read enough)."""
        self._settled.set()

    async def wait_settled(self, timeout: float) -> bool:
        """Wait for EOSE or CLOSED; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                await self._settled.wait()
        except TimeoutError:
            return False
        return True

    def _deliver(self, ev: Event) -> None:
        if ev.id in self._seen:
            return  # a repeat, e.g. stored events sent again after a re-subscription
        self._seen.add(ev.id)
        call_safely(self._on_event, ev)

    def _dropped(self, reason: str) -> None:
        """An event sent for this subscription failed a check (bad id or signature, far future, ...)."""
        if self._on_dropped is not None:
            call_safely(self._on_dropped, reason)

    def _eose(self) -> None:
        self.eose_received = True
        self._settled.set()
        if self._on_eose is not None:
            call_safely(self._on_eose)

    def _closed(self, reason: str, *, notify: bool) -> None:
        if self.closed_reason is not None:
            return
        self.closed_reason = reason
        self._settled.set()
        if notify and self._on_closed is not None:
            call_safely(self._on_closed, reason)

    def __repr__(self) -> str:
        return f"Subscription({self.client.url!r}, {self.id!r}, active={self.active})"


def call_safely(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # a consumer's bug must not kill the connection
        log.exception("relay callback raised")
