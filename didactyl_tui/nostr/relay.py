"""A websockets client for one Nostr relay: publish with OK, live subscriptions, queries, NIP-42.

(Waits use ``asyncio.timeout``, never ``asyncio.wait_for``: on Python 3.11 ``wait_for`` can swallow
a cancellation that races with its result, which leaves a cancelled task running.)

This and ``pool.py`` are the only I/O of the nostr layer. Nothing a relay sends can crash the
client: a frame that is oversized, not JSON, not a known message, or an event whose id or
signature does not verify or that does not match its subscription's filters is dropped and
counted in :attr:`RelayClient.dropped` by reason.

A hostile relay cannot starve the event loop or make us repeat work (issue #10): an event whose
signature failed is remembered (bounded, by id and signature) and never verified again; frames and
signature checks are rate-limited per relay (when a budget is spent the client stops reading that
relay until it recovers, so its socket pushes back); the read loop yields to the event loop every few
milliseconds of work; and a relay whose recent frames are mostly invalid is disconnected and
retried only after a penalty that doubles each time (``disconnects`` counts why).

The connection runs in one background task that reconnects with exponential backoff and jitter
and then re-sends every live subscription and every publish still waiting for its OK.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI

from ..errors import NostrError, RelayError
from .event import Event, sign_event
from .filters import matches_any, validate_filter
from .keys import SecretKey, verify_signature
from .kinds import CLIENT_AUTH
from .messages import (
    BAD_EVENT,
    BAD_JSON,
    BAD_MESSAGE,
    UNKNOWN_MESSAGE,
    ClientAuth,
    ClientClose,
    ClientEvent,
    ClientMessage,
    ClientReq,
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
from .relay_guard import FailedEvents, FrameHealth, RecentIds, TokenBucket
from .replaceable import newest_first
from .results import ConnectionState, RelayVerdict, Verdict
from .subscription import EventCallback, QueryResult, Subscription, call_safely

__all__ = ["QueryResult", "RelayClient", "StateCallback", "Subscription", "call_safely"]

log = logging.getLogger(__name__)

DEFAULT_MAX_FRAME_BYTES = 1024 * 1024
DEFAULT_MAX_FUTURE_SKEW_S = 15 * 60
DEFAULT_VERIFY_RATE = 2000.0  # signature checks per second per relay (one check costs ~60 µs here)
DEFAULT_VERIFY_BURST = 2000.0  # checks a quiet relay may spend at once (a query's stored events)
DEFAULT_FRAME_RATE = 5000.0  # frames read per second per relay, valid or not (bounds the CPU a relay costs)
DEFAULT_FRAME_BURST = 5000.0
DEFAULT_HEALTH_WINDOW = 200  # frames judged together ...
DEFAULT_MAX_INVALID_SHARE = 0.5  # ... and the share of them that may be invalid before we hang up
DEFAULT_PENALTY_BASE_S = 5.0  # first wait after hanging up on a hostile relay; doubles each time
DEFAULT_PENALTY_MAX_S = 600.0
READ_SLICE_S = 0.004  # the read loop yields to the event loop after this much work in a row

# Reasons counted in RelayClient.dropped (other modules may rely on these names).
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
Verifier = Callable[[str, bytes, bytes], bool]  # (pubkey hex, id bytes, sig bytes) -> valid

StateCallback = Callable[[str, ConnectionState], None]


def _describe(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g}s"
    if isinstance(exc, InvalidStatus):
        return f"the server answered HTTP {exc.response.status_code} instead of a websocket"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return str(exc) or type(exc).__name__


class RelayClient:
    """One relay connection. ``start()`` (or ``await connect()``) runs it in the background.

    Defences against a hostile relay (all per relay; a pool shares ``failed_events``):

    * ``verifier`` — the signature check (injected; the default is BIP-340 via secp256k1);
    * ``failed_events`` — the bounded memory of ``(id, sig)`` pairs that failed it;
    * ``verify_rate``/``verify_burst`` — signature checks per second, and how many may be spent at
      once; ``frame_rate``/``frame_burst`` — the same for frames of any kind. Past a budget the
      client stops reading the relay until the budget recovers (nothing is dropped);
    * ``health_window``/``max_invalid_share`` — when more than this share of the last
      ``health_window`` frames were invalid, the client hangs up and waits ``penalty_base``
      seconds (doubling with every hang-up in a row, at most ``penalty_max``) before reconnecting.
    """

    def __init__(
        self,
        url: str,
        *,
        auth_key: SecretKey | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        reconnect: bool = True,
        on_state: StateCallback | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        stable_after: float = 10.0,
        connect_timeout: float = 5.0,
        ping_interval: float | None = 20.0,
        max_future_skew: float | None = DEFAULT_MAX_FUTURE_SKEW_S,
        verifier: Verifier = verify_signature,
        failed_events: FailedEvents | None = None,
        verify_rate: float = DEFAULT_VERIFY_RATE,
        verify_burst: float = DEFAULT_VERIFY_BURST,
        frame_rate: float = DEFAULT_FRAME_RATE,
        frame_burst: float = DEFAULT_FRAME_BURST,
        health_window: int = DEFAULT_HEALTH_WINDOW,
        max_invalid_share: float = DEFAULT_MAX_INVALID_SHARE,
        penalty_base: float = DEFAULT_PENALTY_BASE_S,
        penalty_max: float = DEFAULT_PENALTY_MAX_S,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise RelayError(f"not a relay URL (expected ws:// or wss://): {url!r}")
        self.url = url
        self.auth_key = auth_key
        self.max_frame_bytes = max_frame_bytes
        self.reconnect = reconnect
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.stable_after = stable_after  # a connection that lived this long resets the backoff
        self.connect_timeout = connect_timeout
        self.ping_interval = ping_interval
        self.max_future_skew = max_future_skew
        self.verifier = verifier
        self.failed_events = failed_events if failed_events is not None else FailedEvents()
        try:
            self._verify_budget = TokenBucket(verify_rate, verify_burst, time.monotonic)
            self._frame_budget = TokenBucket(frame_rate, frame_burst, time.monotonic)
            self._health = FrameHealth(health_window, max_invalid_share)
        except ValueError as exc:
            raise RelayError(f"{url}: {exc}") from None
        if not 0 < penalty_base <= penalty_max:
            raise RelayError(f"{url}: penalty_base must be > 0 and at most penalty_max")
        self.frames_received = 0  # every frame read from this relay, over all connections
        self.penalty_base = penalty_base
        self.penalty_max = penalty_max
        self._penalties = 0  # hang-ups for invalid frames in a row (reset by a healthy connection)
        self._penalized = False  # the connection that just ended was ended by us for invalid frames
        self.disconnects: Counter[str] = Counter()  # our hang-ups on this relay, by main invalid reason
        self._closed_subs = RecentIds(1024)  # subscriptions that ended (late events for them are no attack)
        self.dropped: Counter[str] = Counter()
        self.notices: deque[str] = deque(maxlen=20)
        self.last_error = ""
        self.connection_count = 0  # successful handshakes so far
        self._on_state = on_state
        self._state = ConnectionState.DISCONNECTED
        self._subs: dict[str, Subscription] = {}
        self._pending: dict[str, asyncio.Future[tuple[bool | None, str]]] = {}
        self._pending_events: dict[str, Event] = {}  # re-sent after a reconnect until answered
        self._waiters: Counter[str] = Counter()
        self._ws: ClientConnection | None = None
        self._out: asyncio.Queue[str] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._closing = False
        self._pulse = asyncio.Event()  # set and replaced on every change waiters care about
        self._challenge: str | None = None
        self._auth_task: asyncio.Task[tuple[bool, str]] | None = None
        self._moved = asyncio.Event()  # set by retarget(): skip the backoff wait, connect to the new URL
        self._authed = False
        self._background: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        return f"RelayClient({self.url!r}, state={self._state.value})"

    # --- state --------------------------------------------------------------------------------
    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def connected(self) -> bool:
        return self._state is ConnectionState.CONNECTED

    @property
    def authenticated(self) -> bool:
        return self._authed

    def _set_state(self, state: ConnectionState) -> None:
        if state is self._state:
            return
        self._state = state
        self._notify()
        if self._on_state is not None:
            call_safely(self._on_state, self.url, state)

    def _notify(self) -> None:
        pulse, self._pulse = self._pulse, asyncio.Event()
        pulse.set()

    async def _wait_for(self, predicate: Callable[[], bool], deadline: float) -> bool:
        loop = asyncio.get_running_loop()
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):
                    await self._pulse.wait()
            except TimeoutError:
                return predicate()
        return True

    async def _ready(self, deadline: float) -> bool:
        """Connected now, or once the connection attempt in progress succeeds (before deadline).

        A relay that is down (backing off between attempts) answers at once: callers get
        NOT_CONNECTED instead of waiting for a relay that may be gone for a long time.
        """
        if self._state is ConnectionState.CONNECTING:
            await self._wait_for(lambda: self._state is not ConnectionState.CONNECTING, deadline)
        return self._state is ConnectionState.CONNECTED

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start connecting in the background (returns at once)."""
        if self._closing:
            raise RelayError(f"{self.url}: this client was closed")
        if self._runner is None or self._runner.done():
            self._set_state(ConnectionState.CONNECTING)
            self._runner = asyncio.get_running_loop().create_task(self._run(), name=f"relay {self.url}")

    async def connect(self, timeout: float = 5.0) -> None:
        """Connect (or wait for the background connection); raise :class:`RelayError` on failure.

        Fails as soon as the current attempt fails; with ``reconnect`` the client keeps trying
        in the background.
        """
        self.start()
        deadline = asyncio.get_running_loop().time() + timeout
        before = self.connection_count
        # Success means the handshake happened, even if the relay hung up again right after.
        await self._wait_for(
            lambda: self._state is not ConnectionState.CONNECTING or self.connection_count > before, deadline
        )
        if not (self.connected or self.connection_count > before):
            why = self.last_error or f"no connection within {timeout:g}s"
            raise RelayError(f"cannot connect to {self.url}: {why}")

    async def close(self) -> None:
        """Close for good: stop reconnecting, fail waiting publishes, end subscriptions."""
        self._closing = True
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await ws.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
        for task in list(self._background):
            task.cancel()
        self._fail_pending("the client was closed")
        for sub in list(self._subs.values()):
            sub._closed("client closed", notify=False)
        self._subs.clear()
        self._set_state(ConnectionState.CLOSED)

    async def __aenter__(self) -> RelayClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _backoff_delay(self, attempt: int) -> float:
        delay = min(self.backoff_max, self.backoff_base * 2 ** min(attempt, 30))
        return random.uniform(delay / 2, delay)  # jitter: relays restarted together are not hit together

    def _penalty_delay(self) -> float:
        if not self._penalties:
            return 0.0
        return min(self.penalty_max, self.penalty_base * 2 ** min(self._penalties - 1, 30))

    async def _run(self) -> None:
        attempt = 0
        while not self._closing:
            self._set_state(ConnectionState.CONNECTING)
            try:
                ws = await websockets.connect(
                    self.url,
                    open_timeout=self.connect_timeout,
                    close_timeout=1.0,
                    # Frames up to twice the limit are read and dropped (counted); larger ones
                    # make websockets close the connection (1009), and we reconnect.
                    max_size=2 * self.max_frame_bytes,
                    ping_interval=self.ping_interval,
                    ping_timeout=self.ping_interval,
                )
            except asyncio.CancelledError:
                raise
            except InvalidURI as exc:
                self.last_error = f"invalid relay URL: {exc}"
                self._set_state(ConnectionState.DISCONNECTED)
                return
            except Exception as exc:
                self.last_error = _describe(exc, self.connect_timeout)
                log.debug("relay %s: connect failed: %s", self.url, self.last_error)
            else:
                started = time.monotonic()
                self._penalized = False
                await self._serve_connection(ws)
                if self._penalized:
                    self._penalties += 1
                elif time.monotonic() - started >= self.stable_after:
                    attempt, self._penalties = 0, 0
            if self._closing:
                break
            if not self.reconnect:
                self._fail_pending(f"connection lost: {self.last_error}" if self.last_error else "disconnected")
                self._set_state(ConnectionState.DISCONNECTED)
                return
            self._set_state(ConnectionState.BACKOFF)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), max(self._backoff_delay(attempt), self._penalty_delay()))
            attempt = 0 if self._moved.is_set() else attempt + 1
            self._moved.clear()

    def retarget(self, url: str) -> None:
        """Connect to ``url`` from now on (the same relay came back on another address, e.g. the shared
        embedded relay restarted on a free port): at once if waiting to reconnect, else after the next drop.
        Subscriptions and unanswered publishes are re-sent there as after any reconnect."""
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise RelayError(f"not a relay URL (expected ws:// or wss://): {url!r}")
        self.url = url
        self._moved.set()

    async def _serve_connection(self, ws: ClientConnection) -> None:
        out: asyncio.Queue[str] = asyncio.Queue()
        self._ws, self._out = ws, out
        self._challenge, self._authed, self._auth_task = None, False, None
        self.last_error = ""
        self.connection_count += 1
        writer = asyncio.get_running_loop().create_task(self._write_loop(ws, out))
        self._set_state(ConnectionState.CONNECTED)
        # Everything that must survive a reconnect is re-sent, in order, before new traffic.
        for sub in self._subs.values():
            sub._auth_retried = False
            self._enqueue(ClientReq(sub.id, tuple(sub.filters)))
        for ev in self._pending_events.values():
            self._enqueue(ClientEvent.of(ev))
        self._health.reset()
        try:
            await self._read_loop(ws)
        finally:
            writer.cancel()
            self._ws, self._out = None, None
            if self._auth_task is not None:
                self._auth_task.cancel()
            self._set_state(ConnectionState.DISCONNECTED)

    async def _read_loop(self, ws: ClientConnection) -> None:
        busy = 0.0  # seconds of work since we last gave the event loop a turn
        while True:
            try:
                data = await ws.recv(decode=False)
            except ConnectionClosed as exc:
                if not self._penalized:
                    self.last_error = self._describe_close(exc)
                return
            started = time.perf_counter()
            self.frames_received += 1
            self._frame_budget.take()
            try:
                # Every drop reason _on_frame returns counts against the relay's health; repeats and
                # unknown subscriptions (a race with our own CLOSE) do not.
                self._health.note(self._on_frame(data))
            except Exception:  # a bug in our handling must not end the connection
                log.exception("relay %s: failed to handle a frame", self.url)
                self.dropped["internal_error"] += 1
            if (reason := self._health.failing()) is not None:
                self._hang_up(ws, reason)
                return
            busy += time.perf_counter() - started
            # Frames already buffered come back from recv() without a turn of the event loop: give
            # it one every few ms of work, and stop reading while a budget (frames, signature
            # checks) is spent: the relay's socket then pushes back instead of us dropping events.
            if (wait := max(self._verify_budget.wait_time(), self._frame_budget.wait_time())) > 0:
                await asyncio.sleep(wait)
                busy = 0.0
            elif busy >= READ_SLICE_S:
                await asyncio.sleep(0)
                busy = 0.0

    def _hang_up(self, ws: ClientConnection, reason: str) -> None:
        share = sum(self._health.invalid.values()) / self._health.window
        self.disconnects[reason] += 1
        self._penalized = True
        self.last_error = (f"disconnected: {share:.0%} of the last {self._health.window} messages were invalid "
                           f"(mostly {reason})")
        log.warning("relay %s: %s", self.url, self.last_error)
        ws.transport.abort()  # a flooding relay would not answer a polite close in time anyway

    def _describe_close(self, exc: ConnectionClosed) -> str:
        if exc.sent is not None and exc.sent.code == 1009:  # websockets refused a too-big frame
            self.dropped[DROP_OVERSIZED] += 1
            return "the relay sent a message larger than our limit"
        frame = exc.rcvd
        if frame is None:
            return "connection lost"
        return f"connection closed ({frame.code}{': ' + frame.reason if frame.reason else ''})"

    @staticmethod
    async def _write_loop(ws: ClientConnection, out: asyncio.Queue[str]) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                await ws.send(await out.get())

    def _enqueue(self, message: ClientMessage) -> bool:
        if self._out is None or self._state is not ConnectionState.CONNECTED:
            return False
        self._out.put_nowait(message.to_json())
        return True

    def _fail_pending(self, reason: str) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_result((None, reason))
        self._pending.clear()
        self._pending_events.clear()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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
        try:
            ev = Event.from_dict(msg.event)
        except NostrError:
            return self._drop(BAD_EVENT)
        if ev.id in sub._seen:
            return None  # already delivered (a verified copy); nothing new to check
        if (ev.id, ev.sig) in self.failed_events:
            return self._drop(DROP_INVALID_SIG)  # this very event failed before: not checked again
        try:
            computed = ev.computed_id()
        except NostrError:
            return self._drop(BAD_EVENT)
        if computed != ev.id:
            return self._drop(DROP_INVALID_ID)
        if not matches_any(sub.filters, ev):
            return self._drop(DROP_FILTER_MISMATCH)
        if self.max_future_skew is not None and ev.created_at > time.time() + self.max_future_skew:
            return self._drop(DROP_FUTURE)
        self._verify_budget.take()
        if not self.verifier(ev.pubkey, bytes.fromhex(ev.id), bytes.fromhex(ev.sig)):
            self.failed_events.add((ev.id, ev.sig))
            return self._drop(DROP_INVALID_SIG)
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
        auth = sign_event(
            self.auth_key,
            kind=CLIENT_AUTH,
            content="",
            created_at=int(time.time()),
            tags=[["relay", self.url], ["challenge", self._challenge]],
        )
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
        filters: list[Mapping[str, Any]],
        on_event: EventCallback,
        *,
        on_eose: Callable[[], None] | None = None,
        on_closed: Callable[[str], None] | None = None,
        sub_id: str | None = None,
    ) -> Subscription:
        """Open a live subscription; sent now if connected, else on (re)connect.

        ``on_eose`` runs after every (re)subscription's stored events; ``on_closed`` when the
        relay ends the subscription with CLOSED (after one NIP-42 retry for ``auth-required:``).
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
        sub = Subscription(self, sub_id, checked, on_event, on_eose, on_closed)
        self._subs[sub_id] = sub
        self._enqueue(ClientReq(sub_id, tuple(checked)))
        return sub

    def _forget_subscription(self, sub: Subscription, reason: str) -> None:
        if self._subs.get(sub.id) is sub:
            del self._subs[sub.id]
            self._closed_subs.add(sub.id)
            self._enqueue(ClientClose(sub.id))
        sub._closed(reason, notify=False)

    async def query_result(self, filters: list[Mapping[str, Any]], timeout: float = 5.0) -> QueryResult:
        """Stored events matching ``filters`` until EOSE, CLOSED or ``timeout``, newest first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not await self._ready(deadline):
            return QueryResult(self.url, [], False, f"not connected: {self.last_error or self._state.value}")
        found: dict[str, Event] = {}
        sub = self.subscribe(filters, lambda ev: found.setdefault(ev.id, ev))
        try:
            settled = await sub.wait_settled(max(deadline - loop.time(), 0))
        finally:
            closed_by_relay = sub.closed_reason
            await sub.close()
        events = sorted(found.values(), key=newest_first)
        if sub.eose_received:
            # Complete, even if CLOSED followed (rust-nostr closes an ``ids`` query once it is
            # fully answered).
            return QueryResult(self.url, events, True)
        if settled and closed_by_relay is not None:
            return QueryResult(self.url, events, False, f"closed by the relay: {closed_by_relay}")
        lost = "" if self.connected else f" ({self.last_error or 'connection lost'})"
        return QueryResult(self.url, events, False, f"no EOSE within {timeout:g}s{lost}")

    async def query(self, filters: list[Mapping[str, Any]], timeout: float = 5.0) -> list[Event]:
        """The events of :meth:`query_result` (possibly partial when the relay did not finish)."""
        return (await self.query_result(filters, timeout)).events
