"""NIP-01/NIP-42 messages from one client, as the embedded relay answers them.

The state they touch (store threads, writer, peers, limits) belongs to :class:`EmbeddedRelay`
(server.py), which inherits these handlers; this module holds only the message semantics.
Every REQ ends in exactly one EOSE or CLOSED; every EVENT gets one OK.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from ...errors import NostrError
from ..event import Event
from ..kinds import CLIENT_AUTH
from .limits import AuthorMeters, RelayLimits
from .peer import Peer, dumps
from .store import EventReader, SaveResult
from .subscriptions import INT64_LIMIT, CompiledFilter, Subscription, check_filter, filter_cost, tag_index
from .writer import BatchWriter, Verdict

log = logging.getLogger(__name__)

MAX_SUB_ID_LENGTH = 64
AUTH_MAX_AGE_S = 600  # NIP-42 suggests ~10 minutes either way
GIFT_WRAP = 1059
FETCH_BYTES = 256 * 1024  # stored JSON read per thread hop while answering a REQ


def store_error_text(exc: BaseException) -> str:
    text = str(exc)
    if "disk is full" in text or "disk full" in text:
        return "disk full"
    return text or type(exc).__name__


class RelayProtocol:
    limits: RelayLimits
    require_auth: bool
    max_future_seconds: int | None
    allowed_writers: frozenset[str] | None
    gift_wrap_recipients: frozenset[str]
    host: str
    port: int
    _peers: set[Peer]
    _filters_total: int
    _writer: BatchWriter | None
    _reader: EventReader | None
    _author_meters: AuthorMeters
    _run_reader: Callable[..., Awaitable[Any]]

    # --- dispatch -----------------------------------------------------------------------------
    async def _on_message(self, peer: Peer, data: bytes) -> None:
        peer.last_active = time.monotonic()
        if len(data) > self.limits.max_frame_bytes:
            reason = (f"invalid: message of {len(data)} bytes exceeds this relay's limit of "
                      f"{self.limits.max_frame_bytes} bytes")
            event_id = _sniff_event_id(data)
            peer.send(["OK", event_id, False, reason] if event_id else ["NOTICE", reason])
            return
        try:
            msg = json.loads(data)
        except (ValueError, RecursionError):
            peer.send(["NOTICE", "invalid: message is not valid JSON"])
            return
        if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
            peer.send(["NOTICE", "invalid: a message must be a JSON array that starts with its type"])
            return
        kind = msg[0]
        if kind == "EVENT":
            await self._on_event(peer, msg, len(data))
        elif kind == "REQ":
            await self._on_req(peer, msg)
        elif kind == "CLOSE":
            if len(msg) != 2 or not isinstance(msg[1], str):
                peer.send(["NOTICE", "invalid: CLOSE needs exactly one subscription id"])
                return
            self._forget_sub(peer, msg[1])
        elif kind == "AUTH":
            self._on_auth(peer, msg)
        else:
            peer.send(["NOTICE", f"invalid: unsupported message type {kind[:32]!r}"])

    # --- EVENT ----------------------------------------------------------------------------------
    async def _on_event(self, peer: Peer, msg: list[Any], size: int) -> None:
        if len(msg) != 2 or not isinstance(msg[1], dict):
            peer.send(["NOTICE", "invalid: EVENT needs exactly one event object"])
            return
        raw_id = msg[1].get("id")
        try:
            ev = Event.from_dict(msg[1])
        except NostrError as exc:
            if isinstance(raw_id, str) and raw_id:
                peer.send(["OK", raw_id, False, f"invalid: {exc}"])
            else:
                peer.send(["NOTICE", f"invalid: {exc}"])
            return
        # Cheap refusals here; the signature is checked on the writer thread, with the batch.
        refusal = self._refusal_before_verify(peer, ev, size)
        if refusal is not None:
            peer.send(["OK", ev.id, False, refusal])
            return
        await self._queue_save(peer, ev, size)

    def _refusal_before_verify(self, peer: Peer, ev: Event, size: int) -> str | None:
        if self.require_auth and not peer.authed:
            return "auth-required: this relay accepts events from authenticated clients"
        if ev.kind == CLIENT_AUTH:
            return "invalid: kind 22242 is only accepted in an AUTH message"
        if ev.created_at >= INT64_LIMIT:
            return "invalid: created_at must be below 2^63"
        if self.max_future_seconds is not None and ev.created_at > time.time() + self.max_future_seconds:
            return f"invalid: created_at is more than {self.max_future_seconds / 60:g} minutes in the future"
        if self.allowed_writers is not None and not self._may_write(ev):
            return ("blocked: this relay stores events from its owner's keys only "
                    "(and gift wraps addressed to the agent)")
        limited = peer.meter.charge(size)
        if limited:
            return f"rate-limited: this connection sent {limited}"
        return None

    def _admit_verified(self, ev: Event, size: int) -> str | None:
        """On the writer thread, once the signature checked out (a forgery never spends a real
        author's budget)."""
        limited = self._author_meters.charge(ev.pubkey, size)
        return f"rate-limited: this author sent {limited}" if limited else None

    def _may_write(self, ev: Event) -> bool:
        assert self.allowed_writers is not None
        if ev.pubkey in self.allowed_writers:
            return True
        # NIP-17 gift wraps are signed by throwaway keys: accept those addressed to the agent.
        return ev.kind == GIFT_WRAP and any(p in self.gift_wrap_recipients for p in ev.tag_values("p"))

    def _quota_for(self, ev: Event) -> int | None:
        quota = self.limits.max_db_bytes
        if quota <= 0:
            return None
        if self.allowed_writers is not None and ev.pubkey not in self.allowed_writers:
            return int(quota * self.limits.stranger_share)  # strangers never take the owner's last room
        return quota

    async def _queue_save(self, peer: Peer, ev: Event, size: int) -> None:
        writer = self._writer
        if writer is None:
            peer.send(["OK", ev.id, False, "error: the relay is stopping"])
            return
        if peer.pending_writes >= self.limits.max_pending_events and peer.last_write is not None:
            await asyncio.wait([peer.last_write])  # stop reading this client until its saves catch up
        fut = await writer.submit(ev, self._quota_for(ev), size)
        peer.pending_writes += 1
        peer.last_write = fut
        fut.add_done_callback(lambda f: self._saved(peer, ev, f))

    def _saved(self, peer: Peer, ev: Event, fut: asyncio.Future[Verdict]) -> None:
        peer.pending_writes -= 1
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            if not isinstance(exc, sqlite3.Error | OSError | ConnectionError):
                peer.send(["OK", ev.id, False, "error: internal error while storing the event"])
                return
            log.warning("embedded relay could not store %s: %s", ev.id, exc)
            peer.send(["OK", ev.id, False, f"error: could not store the event ({store_error_text(exc)})"])
            return
        verdict = fut.result()
        if verdict.refusal is not None:
            peer.send(["OK", ev.id, False, verdict.refusal])
            return
        if verdict.saved is None:  # ephemeral: verified, relayed, never stored
            peer.send(["OK", ev.id, True, ""])
            self._broadcast(ev)
            return
        result = verdict.saved.result
        if result is SaveResult.STORED:
            peer.send(["OK", ev.id, True, ""])
            self._broadcast(ev)
        elif result is SaveResult.DUPLICATE:
            peer.send(["OK", ev.id, True, "duplicate: already have this event"])
        elif result is SaveResult.SUPERSEDED:
            peer.send(["OK", ev.id, False, "replaced: have a newer version of this event"])
        else:
            peer.send(["OK", ev.id, False, "error: the relay's storage quota is full"])

    def _broadcast(self, ev: Event) -> None:
        raw = ev.to_json()
        index = tag_index(ev)
        for peer in list(self._peers):
            if peer.closing:
                continue
            for sub_id, sub in list(peer.subs.items()):
                if sub.matches(ev, index):
                    peer.push_live(f'["EVENT",{dumps(sub_id)},{raw}]')

    # --- REQ ------------------------------------------------------------------------------------
    def _check_req(self, peer: Peer, msg: list[Any]) -> tuple[str, str | list[dict[str, Any]]]:
        """(sub_id, reason) when the REQ is refused, else (sub_id, its checked filters)."""
        sub_id: str = msg[1]
        lim = self.limits
        if not 1 <= len(sub_id) <= MAX_SUB_ID_LENGTH:
            return sub_id, f"invalid: subscription id must be 1 to {MAX_SUB_ID_LENGTH} characters"
        if self.require_auth and not peer.authed:
            return sub_id, "auth-required: this relay serves authenticated clients only"
        if len(msg) - 2 > lim.max_filters:
            return sub_id, f"invalid: too many filters (limit {lim.max_filters})"
        try:
            filters = [check_filter(f, lim.max_filter_values) for f in msg[2:]]
        except NostrError as exc:
            return sub_id, f"invalid: {exc}"
        old = peer.subs.get(sub_id)
        if old is None and len(peer.subs) >= lim.max_subscriptions:
            return sub_id, f"error: too many open subscriptions (limit {lim.max_subscriptions}); close one first"
        cost = sum(filter_cost(f) for f in filters)
        if peer.cost - (old.cost if old else 0) + cost > lim.max_values_per_connection:
            return sub_id, (f"error: this connection's subscriptions would hold more than "
                            f"{lim.max_values_per_connection} filter values; close some first")
        if self._filters_total - (len(old.filters) if old else 0) + len(filters) > lim.max_filters_total:
            return sub_id, "error: the relay holds too many subscriptions right now; try again later"
        return sub_id, filters

    async def _on_req(self, peer: Peer, msg: list[Any]) -> None:
        if len(msg) < 3 or not isinstance(msg[1], str):
            peer.send(["NOTICE", "invalid: REQ needs a subscription id and at least one filter"])
            return
        sub_id, checked = self._check_req(peer, msg)
        if isinstance(checked, str):
            peer.send(["CLOSED", sub_id, checked])
            return
        filters: list[dict[str, Any]] = checked
        self._forget_sub(peer, sub_id)
        # Registered before the stored query runs, so nothing published meanwhile is missed
        # (it may then arrive twice; clients dedupe by id).
        sub = Subscription(tuple(CompiledFilter.of(f) for f in filters), sum(filter_cost(f) for f in filters))
        peer.subs[sub_id] = sub
        peer.cost += sub.cost
        self._filters_total += len(sub.filters)
        if peer.last_write is not None and not peer.last_write.done():
            await asyncio.wait([peer.last_write])  # a REQ sees the events this client sent before it
        try:
            await self._stream_stored(peer, sub_id, sub, filters)
        except (sqlite3.Error, OSError) as exc:
            log.warning("embedded relay query failed: %s", exc)
            self._forget_sub(peer, sub_id)
            peer.send(["CLOSED", sub_id, "error: the query failed"])

    async def _stream_stored(self, peer: Peer, sub_id: str, sub: Subscription, filters: list[dict[str, Any]]) -> None:
        reader = self._reader
        if reader is None:
            raise sqlite3.OperationalError("the relay is stopping")
        seqs, raws, at = await self._run_reader(reader.plan_and_fetch, filters, FETCH_BYTES)
        prefix = f'["EVENT",{dumps(sub_id)},'
        budget = self.limits.max_result_bytes
        sent = 0
        while True:
            for raw in raws:
                if peer.subs.get(sub_id) is not sub or peer.closing:
                    return  # closed or replaced while the query ran
                sent += len(raw)
                if sent > budget:
                    at = len(seqs)  # the result is cut at the byte budget (like max_limit, a relay cap)
                    break
                if not await peer.send_waiting(prefix + raw + "]"):
                    return
            if at >= len(seqs):
                break
            raws, at = await self._run_reader(reader.fetch, seqs, FETCH_BYTES, at)
        if peer.subs.get(sub_id) is sub:
            peer.send(["EOSE", sub_id])

    def _forget_sub(self, peer: Peer, sub_id: str) -> None:
        old = peer.subs.pop(sub_id, None)
        if old is not None:
            peer.cost -= old.cost
            self._filters_total -= len(old.filters)

    # --- AUTH (NIP-42) --------------------------------------------------------------------------
    def _on_auth(self, peer: Peer, msg: list[Any]) -> None:
        if len(msg) != 2 or not isinstance(msg[1], dict):
            peer.send(["NOTICE", "invalid: AUTH needs exactly one signed event"])
            return
        raw_id = msg[1].get("id")
        try:
            ev = Event.from_dict(msg[1])
            ev.check()
        except NostrError as exc:
            text = str(exc) if str(exc).startswith("invalid:") else f"invalid: {exc}"
            if isinstance(raw_id, str) and raw_id:
                peer.send(["OK", raw_id, False, text])
            else:
                peer.send(["NOTICE", text])
            return
        problem = self._auth_problem(peer, ev)
        if problem:
            peer.send(["OK", ev.id, False, f"invalid: {problem}"])
            return
        peer.authed.add(ev.pubkey)
        peer.send(["OK", ev.id, True, ""])

    def _auth_problem(self, peer: Peer, ev: Event) -> str | None:
        if ev.kind != CLIENT_AUTH:
            return f"an AUTH event must be kind {CLIENT_AUTH}"
        if ev.first_tag("challenge") != peer.challenge:
            return "the challenge tag does not match the challenge this relay sent"
        if not self._names_this_relay(ev.first_tag("relay") or ""):
            return "the relay tag does not name this relay"
        if abs(time.time() - ev.created_at) > AUTH_MAX_AGE_S:
            return "created_at is too far from the current time"
        return None

    def _names_this_relay(self, url: str) -> bool:
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError:
            return False
        if parts.scheme not in ("ws", "wss") or port != self.port:
            return False
        if self.host in ("0.0.0.0", "::", ""):
            return True  # listening everywhere: the client may have used any of our addresses
        loopback = {"127.0.0.1", "localhost", "::1"}
        host = (parts.hostname or "").lower()
        return host == self.host.lower() or (self.host in loopback and host in loopback)


def _sniff_event_id(data: bytes) -> str | None:
    """The id of an oversized EVENT, so the publisher gets an OK it can match."""
    try:
        msg = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if isinstance(msg, list) and len(msg) >= 2 and msg[0] == "EVENT" and isinstance(msg[1], dict):
        eid = msg[1].get("id")
        if isinstance(eid, str) and eid:
            return eid
    return None
