"""One relay's live subscriptions, and queries built on them.

Every subscription is re-sent after each reconnect until it is closed (by us, or by the relay with CLOSED; one
``auth-required:`` CLOSED is answered with NIP-42 and the subscription sent again). The ids of subscriptions that
ended are remembered (bounded), so that a relay's late events for them are counted as a race, not as an attack.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from ..errors import NostrError
from .event import Event
from .filters import validate_filter
from .messages import ClientClose, ClientReq, Prefix
from .relay_auth import Nip42Auth
from .relay_guard import RecentIds
from .relay_link import RelayLink
from .replaceable import newest_first
from .subscription import EventCallback, QueryResult, Subscription


class Subscriptions:
    """The subscriptions open on one relay, by id. ``auth_timeout``: how long a NIP-42 retry may take."""

    def __init__(self, link: RelayLink, auth: Nip42Auth, *, auth_timeout: float) -> None:
        self._link = link
        self._auth = auth
        self._auth_timeout = auth_timeout
        self._subs: dict[str, Subscription] = {}
        self._ended = RecentIds(1024)  # subscriptions that ended (late events for them are no attack)
        self._auth_retried: set[str] = set()  # refused for auth-required on this connection, and retried
        self._background: set[asyncio.Task[None]] = set()  # NIP-42 retries in progress

    @property
    def url(self) -> str:  # a subscription's owner names its relay
        return self._link.url

    def get(self, sub_id: str) -> Subscription | None:
        return self._subs.get(sub_id)

    def recently_ended(self, sub_id: str) -> bool:
        return sub_id in self._ended

    def subscribe(
        self,
        filters: Sequence[Mapping[str, Any]],
        on_event: EventCallback,
        *,
        on_eose: Callable[[], None] | None = None,
        on_closed: Callable[[str], None] | None = None,
        on_dropped: Callable[[str], None] | None = None,
        sub_id: str | None = None,
    ) -> Subscription:
        """Open a live subscription; sent now if connected, else on (re)connect.

        ``on_eose`` runs after every (re)subscription's stored events; ``on_closed`` when the
        relay ends the subscription with CLOSED (after one NIP-42 retry for ``auth-required:``);
        ``on_dropped(reason)`` for each event sent for it that failed a check (counted in ``dropped`` too).
        Raises :class:`NostrError` for a malformed filter.
        """
        if not filters:
            raise NostrError("a subscription needs at least one filter")
        checked = [validate_filter(f) for f in filters]
        sub_id = sub_id or secrets.token_hex(8)
        if not 1 <= len(sub_id) <= 64:
            raise NostrError("a subscription id must be 1 to 64 characters")
        old = self._subs.get(sub_id)
        if old is not None:
            old._closed("replaced by a new subscription with the same id", notify=False)
            self._ended.add(sub_id)
        sub = Subscription(self, sub_id, checked, on_event, on_eose, on_closed, on_dropped)
        self._subs[sub_id] = sub
        self._auth_retried.discard(sub_id)  # a new subscription under that id gets its own retry
        self._link.send(ClientReq(sub_id, tuple(checked)))
        return sub

    def forget_subscription(self, sub: Subscription, reason: str) -> None:
        """Stop re-sending ``sub`` (and send CLOSE when connected)."""
        if self._subs.get(sub.id) is sub:
            del self._subs[sub.id]
            self._auth_retried.discard(sub.id)
            self._ended.add(sub.id)
            self._link.send(ClientClose(sub.id))
        sub._closed(reason, notify=False)

    def closed_by_relay(self, sub_id: str, reason: str) -> None:
        """The relay sent CLOSED: the subscription ends, unless it is the first ``auth-required:`` (then NIP-42)."""
        sub = self._subs.get(sub_id)
        if sub is None:
            return
        retry = self._auth.key is not None and sub_id not in self._auth_retried
        if retry and Prefix.of(reason) is Prefix.AUTH_REQUIRED:
            self._auth_retried.add(sub_id)
            self._spawn(self._auth_then_resubscribe(sub, reason))
            return
        self._end(sub, reason or "closed by the relay")

    async def _auth_then_resubscribe(self, sub: Subscription, closed_reason: str) -> None:
        deadline = asyncio.get_running_loop().time() + self._auth_timeout
        ok, why = await self._auth.authenticate(deadline)
        if self._subs.get(sub.id) is not sub:
            return
        if ok:
            self._link.send(ClientReq(sub.id, tuple(sub.filters)))
        else:
            self._end(sub, f"{closed_reason} (authentication failed: {why})")

    def _end(self, sub: Subscription, reason: str) -> None:
        del self._subs[sub.id]
        self._auth_retried.discard(sub.id)
        self._ended.add(sub.id)
        sub._closed(reason, notify=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def resend(self) -> None:
        """A new connection: every live subscription is sent again (and may be retried with NIP-42 again)."""
        self._auth_retried.clear()
        for sub in self._subs.values():
            self._link.send(ClientReq(sub.id, tuple(sub.filters)))

    def close_all(self, reason: str) -> None:
        """The client is closed: retries stop, every subscription ends (its owner is not called back)."""
        for task in list(self._background):
            task.cancel()
        for sub in list(self._subs.values()):
            sub._closed(reason, notify=False)
        self._subs.clear()
        self._auth_retried.clear()

    # --- queries --------------------------------------------------------------------------------
    async def query_result(self, filters: Sequence[Mapping[str, Any]], timeout: float = 5.0, *,
                           max_bytes: int | None = None) -> QueryResult:
        """Stored events matching ``filters`` until EOSE, CLOSED or ``timeout``, newest first. With ``max_bytes``
        the answer ends (incomplete) at the event that would take it past that many bytes (``Event.approx_bytes``)."""
        link = self._link
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not await link.ready(deadline):
            return QueryResult(link.url, [], False, f"not connected: {link.last_error or link.state.value}")
        found: dict[str, Event] = {}
        size = 0
        full = False

        def take(ev: Event) -> None:
            nonlocal size, full
            if full or ev.id in found:
                return
            size += ev.approx_bytes()
            if max_bytes is not None and size > max_bytes:
                full = True
                sub.settle()  # stop waiting: the rest is not read
                return
            found[ev.id] = ev

        sub = self.subscribe(filters, take)
        try:
            settled = await sub.wait_settled(max(deadline - loop.time(), 0))
        finally:
            closed_by_relay = sub.closed_reason
            await sub.close()
        events = sorted(found.values(), key=newest_first)
        if full:
            return QueryResult(link.url, events, False, f"cut at {max_bytes:,} bytes", cut=True)
        if sub.eose_received:
            # Complete, even if CLOSED followed (rust-nostr closes an ``ids`` query once it is
            # fully answered).
            return QueryResult(link.url, events, True)
        if settled and closed_by_relay is not None:
            return QueryResult(link.url, events, False, f"closed by the relay: {closed_by_relay}")
        lost = "" if link.connected else f" ({link.last_error or 'connection lost'})"
        return QueryResult(link.url, events, False, f"no EOSE within {timeout:g}s{lost}")

    async def query(self, filters: Sequence[Mapping[str, Any]], timeout: float = 5.0) -> list[Event]:
        """The events of :meth:`query_result` (possibly partial when the relay did not finish)."""
        return (await self.query_result(filters, timeout)).events
