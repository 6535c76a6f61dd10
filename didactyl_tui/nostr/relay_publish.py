"""Publishing to one relay: send an event, wait for its OK, re-send it after a reconnect until it is answered.

Each event waiting for its OK is held once, however many callers publish it at once (they share the answer), and only
while someone waits: a caller's timeout bounds how long it stays (no OK is awaited for an event nobody waits for).
"""

from __future__ import annotations

import asyncio
from collections import Counter

from .event import Event
from .messages import ClientEvent, Prefix
from .relay_auth import Nip42Auth, OkAnswer
from .relay_link import RelayLink
from .results import RelayVerdict, Verdict


class Publishes:
    """The events sent to one relay that wait for its OK; a refusal for ``auth-required:`` is retried once after
    NIP-42 (``auth``)."""

    def __init__(self, link: RelayLink, auth: Nip42Auth) -> None:
        self._link = link
        self._auth = auth
        self._answers: dict[str, asyncio.Future[OkAnswer]] = {}
        self._events: dict[str, Event] = {}  # re-sent after a reconnect until answered
        self._waiters: Counter[str] = Counter()

    async def publish(self, event: Event, timeout: float = 5.0) -> RelayVerdict:
        """Send ``event`` and wait for the relay's OK. Never raises for relay problems.

        ``OK false "duplicate: ..."`` counts as accepted (the relay holds the event). A publish
        whose connection drops is re-sent after the reconnect, within the same timeout.
        """
        link = self._link
        deadline = asyncio.get_running_loop().time() + timeout
        if not await link.ready(deadline):
            return RelayVerdict(link.url, Verdict.NOT_CONNECTED, link.last_error or link.state.value)
        auth_tried = False
        while True:
            accepted, reason = await self._send_and_wait(event, deadline)
            if accepted is None:
                if reason == "timeout":
                    lost = "" if link.connected else f" ({link.last_error or 'connection lost'})"
                    return RelayVerdict(link.url, Verdict.TIMEOUT, f"no OK within {timeout:g}s{lost}")
                return RelayVerdict(link.url, Verdict.NOT_CONNECTED, reason)
            prefix = Prefix.of(reason)
            if not accepted and prefix is Prefix.AUTH_REQUIRED and self._auth.key is not None and not auth_tried:
                auth_tried = True
                ok, why = await self._auth.authenticate(deadline)
                if ok:
                    continue
                return RelayVerdict(link.url, Verdict.REJECTED, f"{reason} (authentication failed: {why})")
            if accepted or prefix is Prefix.DUPLICATE:
                return RelayVerdict(link.url, Verdict.ACCEPTED, reason, prefix)
            return RelayVerdict(link.url, Verdict.REJECTED, reason, prefix)

    async def _send_and_wait(self, event: Event, deadline: float) -> OkAnswer:
        fut = self._answers.get(event.id)
        if fut is None or fut.done():
            fut = asyncio.get_running_loop().create_future()
            self._answers[event.id] = fut
            self._events[event.id] = event
            self._link.send(ClientEvent.of(event))
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
                if self._answers.get(event.id) is fut:
                    del self._answers[event.id]
                    self._events.pop(event.id, None)

    def answered(self, event_id: str, accepted: bool, reason: str) -> None:
        """The relay's OK for ``event_id`` (ignored unless someone waits for it)."""
        fut = self._answers.get(event_id)
        if fut is not None and not fut.done():
            fut.set_result((accepted, reason))

    def resend(self) -> None:
        """A new connection: every event still waiting for its OK goes again."""
        for event in self._events.values():
            self._link.send(ClientEvent.of(event))

    def fail_all(self, reason: str) -> None:
        """No answer will come (the client was closed, or the connection is lost for good)."""
        for fut in self._answers.values():
            if not fut.done():
                fut.set_result((None, reason))
        self._answers.clear()
        self._events.clear()
