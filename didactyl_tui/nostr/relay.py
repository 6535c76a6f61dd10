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
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection

from ..errors import RelayError
from .event import Event
from .keys import SecretKey, verify_signature
from .messages import ClientMessage
from .relay_connection import ConnectionMixin
from .relay_guard import FailedEvents, FrameHealth, RecentIds, TokenBucket
from .relay_incoming import IncomingMixin
from .relay_proof import ProofKey
from .relay_requests import RequestsMixin
from .results import ConnectionState
from .subscription import Subscription, call_safely

if TYPE_CHECKING:  # only named in annotations: the signer's module (and NIP-44) loads with the agent
    from .signer import Signer

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

Verifier = Callable[[str, bytes, bytes], bool]  # (pubkey hex, id bytes, sig bytes) -> valid

StateCallback = Callable[[str, ConnectionState], None]


class RelayClient(ConnectionMixin, IncomingMixin, RequestsMixin):
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

    ``proof_key`` (the data dir's own embedded relay only): every connection's server must prove in its handshake
    that it holds the key, or the client hangs up before sending anything (``refusals``, ``last_error``); see
    :mod:`.relay_connection`.
    """

    def __init__(
        self,
        url: str,
        *,
        auth_key: SecretKey | Signer | None = None,
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
        proof_key: ProofKey | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise RelayError(f"not a relay URL (expected ws:// or wss://): {url!r}")
        self.url = url
        # The server must prove in every handshake that it holds this key (the data dir's own embedded relay), or
        # it is hung up on before any frame is sent; None: any server at the URL is used (a public relay).
        self.proof_key = proof_key
        self.refusals = 0  # connections hung up on at once: the server did not prove it holds proof_key
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
