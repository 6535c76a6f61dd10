"""What :class:`~.relay.RelayClient` asks of a relay: publish with OK, subscriptions, queries, NIP-42."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DidactylError, NostrError
from .event import Event, sign_event
from .filters import validate_filter
from .keys import SecretKey
from .kinds import CLIENT_AUTH
from .messages import ClientAuth, ClientClose, ClientEvent, ClientReq, Prefix
from .replaceable import newest_first
from .results import RelayVerdict, Verdict
from .subscription import EventCallback, QueryResult, Subscription

if TYPE_CHECKING:  # the client's state, as each half uses it: declared for the type checker (relay_state.py)
    from .relay_state import RelayState
else:
    RelayState = object


class RequestsMixin(RelayState):
    """The requests half of :class:`~.relay.RelayClient` (state lives there, declared in relay_state.py)."""

    # --- NIP-42 -------------------------------------------------------------------------------
    async def _authenticate(self, deadline: float) -> tuple[bool, str]:
        """Answer the relay's AUTH challenge (once per connection; concurrent callers share it)."""
        if self.auth_key is None:
            return False, "no key to authenticate with"
        if self._authed:
            return True, ""
        task = self._auth_task
        if task is None or task.done():
            task = self._auth_task = asyncio.get_running_loop().create_task(self._send_auth(deadline))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # the connection dropped; our own caller was not cancelled
                return False, "connection lost during authentication"
            raise

    async def _send_auth(self, deadline: float) -> tuple[bool, str]:
        assert self.auth_key is not None
        if not await self._wait_for(lambda: self._challenge is not None or not self.connected, deadline):
            return False, "the relay sent no AUTH challenge"
        if not self.connected or self._challenge is None:
            return False, "not connected"
        tags = [["relay", self.url], ["challenge", self._challenge]]
        if isinstance(self.auth_key, SecretKey):
            auth = sign_event(self.auth_key, kind=CLIENT_AUTH, content="", created_at=int(time.time()), tags=tags)
        else:  # a key behind a signer (NIP-46: a round trip), bounded like the rest of the sign-in
            try:
                async with asyncio.timeout_at(deadline):
                    auth = await self.auth_key.sign_event(kind=CLIENT_AUTH, content="", created_at=int(time.time()),
                                                          tags=tags)
            except TimeoutError:
                return False, "the signer did not sign our AUTH in time"
            except DidactylError as exc:
                return False, f"the signer did not sign our AUTH: {exc.message}"
        fut: asyncio.Future[tuple[bool | None, str]] = asyncio.get_running_loop().create_future()
        self._pending[auth.id] = fut
        try:
            self._enqueue(ClientAuth.of(auth))
            try:
                async with asyncio.timeout_at(deadline):
                    accepted, reason = await asyncio.shield(fut)
            except TimeoutError:
                return False, "the relay did not answer our AUTH"
        finally:
            self._pending.pop(auth.id, None)
        self._authed = bool(accepted)
        return self._authed, reason

    async def _auth_then_resubscribe(self, sub: Subscription, closed_reason: str) -> None:
        deadline = asyncio.get_running_loop().time() + self.connect_timeout
        ok, why = await self._authenticate(deadline)
        if self._subs.get(sub.id) is not sub:
            return
        if ok:
            self._enqueue(ClientReq(sub.id, tuple(sub.filters)))
        else:
            del self._subs[sub.id]
            self._closed_subs.add(sub.id)
            sub._closed(f"{closed_reason} (authentication failed: {why})", notify=True)

    # --- publish ------------------------------------------------------------------------------
    async def publish(self, event: Event, timeout: float = 5.0) -> RelayVerdict:
        """Send ``event`` and wait for the relay's OK. Never raises for relay problems.

        ``OK false "duplicate: ..."`` counts as accepted (the relay holds the event). A publish
        whose connection drops is re-sent after the reconnect, within the same timeout.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not await self._ready(deadline):
            why = self.last_error or self._state.value
            return RelayVerdict(self.url, Verdict.NOT_CONNECTED, why)
        auth_tried = False
        while True:
            accepted, reason = await self._send_and_wait(event, deadline)
            if accepted is None:
                if reason == "timeout":
                    lost = "" if self.connected else f" ({self.last_error or 'connection lost'})"
                    return RelayVerdict(self.url, Verdict.TIMEOUT, f"no OK within {timeout:g}s{lost}")
                return RelayVerdict(self.url, Verdict.NOT_CONNECTED, reason)
            prefix = Prefix.of(reason)
            if not accepted and prefix is Prefix.AUTH_REQUIRED and self.auth_key is not None and not auth_tried:
                auth_tried = True
                ok, why = await self._authenticate(deadline)
                if ok:
                    continue
                return RelayVerdict(self.url, Verdict.REJECTED, f"{reason} (authentication failed: {why})")
            if accepted or prefix is Prefix.DUPLICATE:
                return RelayVerdict(self.url, Verdict.ACCEPTED, reason, prefix)
            return RelayVerdict(self.url, Verdict.REJECTED, reason, prefix)

    async def _send_and_wait(self, event: Event, deadline: float) -> tuple[bool | None, str]:
        loop = asyncio.get_running_loop()
        fut = self._pending.get(event.id)
        if fut is None or fut.done():
            fut = loop.create_future()
            self._pending[event.id] = fut
            self._pending_events[event.id] = event
            self._enqueue(ClientEvent.of(event))
        # else: the same event is already on its way; share its answer instead of sending twice
        self._waiters[event.id] += 1
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.shield(fut)
        except TimeoutError:
            return None, "timeout"
        finally:
            self._waiters[event.id] -= 1
            if self._waiters[event.id] <= 0:
                del self._waiters[event.id]
                if self._pending.get(event.id) is fut:
                    del self._pending[event.id]
                    self._pending_events.pop(event.id, None)

    # --- subscribe / query --------------------------------------------------------------------
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
            self._closed_subs.add(sub_id)
        sub = Subscription(self, sub_id, checked, on_event, on_eose, on_closed, on_dropped)
        self._subs[sub_id] = sub
        self._enqueue(ClientReq(sub_id, tuple(checked)))
        return sub

    def forget_subscription(self, sub: Subscription, reason: str) -> None:
        if self._subs.get(sub.id) is sub:
            del self._subs[sub.id]
            self._closed_subs.add(sub.id)
            self._enqueue(ClientClose(sub.id))
        sub._closed(reason, notify=False)

    async def query_result(self, filters: Sequence[Mapping[str, Any]], timeout: float = 5.0, *,
                           max_bytes: int | None = None) -> QueryResult:
        """Stored events matching ``filters`` until EOSE, CLOSED or ``timeout``, newest first. With ``max_bytes``
        the answer ends (incomplete) at the event that would take it past that many bytes (``Event.approx_bytes``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not await self._ready(deadline):
            return QueryResult(self.url, [], False, f"not connected: {self.last_error or self._state.value}")
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
                sub._settled.set()  # stop waiting: the rest is not read
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
            return QueryResult(self.url, events, False, f"cut at {max_bytes:,} bytes", cut=True)
        if sub.eose_received:
            # Complete, even if CLOSED followed (rust-nostr closes an ``ids`` query once it is
            # fully answered).
            return QueryResult(self.url, events, True)
        if settled and closed_by_relay is not None:
            return QueryResult(self.url, events, False, f"closed by the relay: {closed_by_relay}")
        lost = "" if self.connected else f" ({self.last_error or 'connection lost'})"
        return QueryResult(self.url, events, False, f"no EOSE within {timeout:g}s{lost}")

    async def query(self, filters: Sequence[Mapping[str, Any]], timeout: float = 5.0) -> list[Event]:
        """The events of :meth:`query_result` (possibly partial when the relay did not finish)."""
        return (await self.query_result(filters, timeout)).events
