"""How :class:`~.relay.RelayClient` handles what a relay sends: every frame checked and counted.

A frame that is oversized, not JSON, not a known message, or an event whose id or signature does not
verify or that does not match its subscription's filters is dropped and counted by reason.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ..errors import NostrError
from .event import Event
from .filters import matches_any
from .messages import (
    BAD_EVENT,
    BAD_JSON,
    BAD_MESSAGE,
    UNKNOWN_MESSAGE,
    MessageError,
    Prefix,
    RelayAuth,
    RelayClosed,
    RelayEose,
    RelayEvent,
    RelayNotice,
    RelayOk,
    parse_relay_message,
    sniff_subscription_id,
)
from .subscription import Subscription

if TYPE_CHECKING:  # the client's state, as each half uses it: declared for the type checker (relay_state.py)
    from .relay_state import RelayState
else:
    RelayState = object

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


class IncomingMixin(RelayState):
    """The incoming half of :class:`~.relay.RelayClient` (state lives there, declared in relay_state.py)."""

    # --- incoming -----------------------------------------------------------------------------
    def _on_frame(self, data: bytes) -> str | None:
        """Handle one frame; returns why it was invalid (a drop reason), or None."""
        if len(data) > self.max_frame_bytes:
            return self._drop(DROP_OVERSIZED)
        sniffed = sniff_subscription_id(data)
        if sniffed is not None and sniffed not in self._subs:
            return self._unknown_sub(sniffed)  # not worth parsing: nobody asked for it
        try:
            msg = parse_relay_message(data)
        except MessageError as exc:
            return self._drop(exc.kind)
        if isinstance(msg, RelayEvent):
            return self._on_event(msg)
        if isinstance(msg, RelayOk):
            fut = self._pending.get(msg.event_id)
            if fut is not None and not fut.done():
                fut.set_result((msg.accepted, msg.reason))
        elif isinstance(msg, RelayEose):
            sub = self._subs.get(msg.sub_id)
            if sub is not None:
                sub._eose()
        elif isinstance(msg, RelayClosed):
            self._on_closed(msg.sub_id, msg.reason)
        elif isinstance(msg, RelayNotice):
            self.notices.append(msg.text[:500])  # kept as sent: sanitised by whoever shows it
            log.info("relay %s says: %r", self.url, msg.text[:200])  # repr: no control chars in logs
        elif isinstance(msg, RelayAuth):
            self._challenge = msg.challenge
            self._notify()
        return None

    def _unknown_sub(self, sub_id: str) -> str | None:
        self.dropped[DROP_UNKNOWN_SUB] += 1
        # Events for a subscription we just closed are a race, not an attack; for one we never
        # opened, they are invalid frames.
        return None if sub_id in self._closed_subs else DROP_UNKNOWN_SUB

    def _drop(self, reason: str) -> str:
        self.dropped[reason] += 1
        return reason

    def _on_event(self, msg: RelayEvent) -> str | None:
        sub = self._subs.get(msg.sub_id)
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
        if ev.id in sub._seen:
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
        self._verify_budget.take()
        if not self.verifier(ev.pubkey, bytes.fromhex(ev.id), bytes.fromhex(ev.sig)):
            self.failed_events.add((ev.id, ev.sig))
            return DROP_INVALID_SIG
        sub._deliver(ev)
        return None

    def _on_closed(self, sub_id: str, reason: str) -> None:
        sub = self._subs.get(sub_id)
        if sub is None:
            return
        if Prefix.of(reason) is Prefix.AUTH_REQUIRED and self.auth_key is not None and not sub._auth_retried:
            sub._auth_retried = True
            self._spawn(self._auth_then_resubscribe(sub, reason))
            return
        del self._subs[sub_id]
        self._closed_subs.add(sub_id)
        sub._closed(reason or "closed by the relay", notify=True)
