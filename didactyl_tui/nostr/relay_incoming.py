"""How :class:`~.relay.RelayClient` handles what a relay sends: every frame checked, counted and routed.

A frame that is oversized, not JSON, not a known message, or an event whose id or signature does not
verify or that does not match its subscription's filters is dropped and counted by reason. What passes goes to
the part that asked for it: an event, EOSE or CLOSED to its subscription, an OK to the publish (or the NIP-42
answer) that waits for it, an AUTH challenge to NIP-42; a NOTICE is kept (the last few).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable

from ..errors import NostrError
from .event import Event
from .filters import matches_any
from .messages import (
    BAD_EVENT,
    BAD_JSON,
    BAD_MESSAGE,
    UNKNOWN_MESSAGE,
    MessageError,
    RelayAuth,
    RelayClosed,
    RelayEose,
    RelayEvent,
    RelayNotice,
    RelayOk,
    parse_relay_message,
    sniff_subscription_id,
)
from .relay_auth import Nip42Auth
from .relay_guard import FailedEvents, TokenBucket
from .relay_link import RelayLink
from .relay_publish import Publishes
from .relay_subscriptions import Subscriptions
from .subscription import Subscription

Verifier = Callable[[str, bytes, bytes], bool]  # (pubkey hex, id bytes, sig bytes) -> valid

log = logging.getLogger("didactyl_tui.nostr.relay")

DROP_OVERSIZED = "oversized"
DROP_BAD_JSON = BAD_JSON
DROP_BAD_MESSAGE = BAD_MESSAGE  # JSON, but not a well-formed relay message
DROP_UNKNOWN_MESSAGE = UNKNOWN_MESSAGE  # a message type we never asked for
DROP_UNKNOWN_SUB = "unknown_sub"
DROP_BAD_EVENT = BAD_EVENT  # not the shape of an event
DROP_INVALID_ID = "invalid_id"
DROP_INVALID_SIG = "invalid_sig"
DROP_FILTER_MISMATCH = "filter_mismatch"
DROP_FUTURE = "future_created_at"


class IncomingRouter:
    """Checks each frame from one relay and hands it to the part it is for.

    ``verifier`` checks signatures, each one taken from ``verify_budget`` (the connection stops reading while it
    is in debt: :meth:`verify_wait`); ``failed_events`` remembers the events that failed it (a pool shares one).
    ``max_future_skew``: how far ahead of our clock an event may be dated (None: any).
    """

    def __init__(self, link: RelayLink, subscriptions: Subscriptions, publishes: Publishes, auth: Nip42Auth, *,
                 max_frame_bytes: int, max_future_skew: float | None, verifier: Verifier,
                 failed_events: FailedEvents, verify_budget: TokenBucket) -> None:
        self._link = link
        self._subscriptions = subscriptions
        self._publishes = publishes
        self._auth = auth
        self.max_frame_bytes = max_frame_bytes
        self.max_future_skew = max_future_skew
        self.verifier = verifier
        self.failed_events = failed_events
        self.verify_budget = verify_budget
        self.dropped: Counter[str] = Counter()
        self.notices: deque[str] = deque(maxlen=20)

    def handle(self, data: bytes) -> str | None:
        """Handle one frame; returns why it was invalid (a drop reason), or None."""
        if len(data) > self.max_frame_bytes:
            return self.drop(DROP_OVERSIZED)
        sniffed = sniff_subscription_id(data)
        if sniffed is not None and self._subscriptions.get(sniffed) is None:
            return self._unknown_sub(sniffed)  # not worth parsing: nobody asked for it
        try:
            msg = parse_relay_message(data)
        except MessageError as exc:
            return self.drop(exc.kind)
        if isinstance(msg, RelayEvent):
            return self._on_event(msg)
        if isinstance(msg, RelayOk):
            self._publishes.answered(msg.event_id, msg.accepted, msg.reason)
            self._auth.answered(msg.event_id, msg.accepted, msg.reason)
        elif isinstance(msg, RelayEose):
            sub = self._subscriptions.get(msg.sub_id)
            if sub is not None:
                sub._eose()
        elif isinstance(msg, RelayClosed):
            self._subscriptions.closed_by_relay(msg.sub_id, msg.reason)
        elif isinstance(msg, RelayNotice):
            self.notices.append(msg.text[:500])  # kept as sent: sanitised by whoever shows it
            log.info("relay %s says: %r", self._link.url, msg.text[:200])  # repr: no control chars in logs
        elif isinstance(msg, RelayAuth):
            self._auth.challenged(msg.challenge)
        return None

    def verify_wait(self) -> float:
        """Seconds until signature checks are within their budget again (0 when they are)."""
        return self.verify_budget.wait_time()

    def drop(self, reason: str) -> str:
        """Count a frame dropped for ``reason`` (also for what the connection drops before it gets here)."""
        self.dropped[reason] += 1
        return reason

    def _unknown_sub(self, sub_id: str) -> str | None:
        self.dropped[DROP_UNKNOWN_SUB] += 1
        # Events for a subscription we just closed are a race, not an attack; for one we never
        # opened, they are invalid frames.
        return None if self._subscriptions.recently_ended(sub_id) else DROP_UNKNOWN_SUB

    def _on_event(self, msg: RelayEvent) -> str | None:
        sub = self._subscriptions.get(msg.sub_id)
        if sub is None:
            return self._unknown_sub(msg.sub_id)
        reason = self._check_event(sub, msg)
        if reason is not None:
            self.dropped[reason] += 1
            sub._dropped(reason)
        return reason

    def _check_event(self, sub: Subscription, msg: RelayEvent) -> str | None:
        """Deliver the event to ``sub`` when every check passes; else the drop reason."""
        try:
            ev = Event.from_dict(msg.event)
        except NostrError:
            return BAD_EVENT
        if sub.seen(ev.id):
            return None  # already delivered (a verified copy); nothing new to check
        if (ev.id, ev.sig) in self.failed_events:
            return DROP_INVALID_SIG  # this very event failed before: not checked again
        try:
            computed = ev.computed_id()
        except NostrError:
            return BAD_EVENT
        if computed != ev.id:
            return DROP_INVALID_ID
        if not matches_any(sub.filters, ev):
            return DROP_FILTER_MISMATCH
        if self.max_future_skew is not None and ev.created_at > time.time() + self.max_future_skew:
            return DROP_FUTURE
        self.verify_budget.take()
        if not self.verifier(ev.pubkey, bytes.fromhex(ev.id), bytes.fromhex(ev.sig)):
            self.failed_events.add((ev.id, ev.sig))
            return DROP_INVALID_SIG
        sub._deliver(ev)
        return None
