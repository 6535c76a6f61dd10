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

:class:`RelayClient` is a facade over parts that each own their state and are handed what they use:

* :class:`~.relay_link.RelayLink` — the address, the connection state (and waiting on it), the outgoing queue,
  the last error: what every other part sees of the connection;
* :class:`~.relay_connection.RelayConnection` — the websocket: connect (and the embedded relay's proof), reconnect
  with backoff and penalties, the read loop with its budgets and health, the write loop;
* :class:`~.relay_incoming.IncomingRouter` — every frame checked, counted and handed to the part it is for;
* :class:`~.relay_subscriptions.Subscriptions` — live subscriptions (re-sent after a reconnect) and queries;
* :class:`~.relay_publish.Publishes` — events waiting for their OK (re-sent after a reconnect);
* :class:`~.relay_auth.Nip42Auth` — the relay's challenge and our answer, once per connection.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import RelayError
from .event import Event
from .keys import SecretKey, verify_signature
from .relay_auth import Nip42Auth
from .relay_connection import RelayConnection
from .relay_guard import FailedEvents, FrameHealth, TokenBucket
from .relay_incoming import IncomingRouter, Verifier
from .relay_link import RelayLink, StateCallback
from .relay_proof import ProofKey
from .relay_publish import Publishes
from .relay_subscriptions import Subscriptions
from .results import ConnectionState, RelayVerdict
from .subscription import EventCallback, QueryResult, Subscription

if TYPE_CHECKING:  # only named in annotations: the signer's module (and NIP-44) loads with the agent
    from .signer import Signer

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

    ``proof_key`` (the data dir's own embedded relay only): every connection's server must prove in its handshake
    that it holds the key, or the client hangs up before sending anything (``refusals``, ``last_error``); see
    :mod:`.relay_connection`.

    The parts are public (``link``, ``connection``, ``incoming``, ``subscriptions``, ``publishes``, ``auth``) for
    tests and status; the rest of the code uses the methods and properties here.
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
        self.link = link = RelayLink(url, on_state)
        try:
            verify_budget = TokenBucket(verify_rate, verify_burst, time.monotonic)
            frame_budget = TokenBucket(frame_rate, frame_burst, time.monotonic)
            health = FrameHealth(health_window, max_invalid_share)
        except ValueError as exc:
            raise RelayError(f"{url}: {exc}") from None
        self.auth = Nip42Auth(link, auth_key)
        self.publishes = Publishes(link, self.auth)
        self.subscriptions = Subscriptions(link, self.auth, auth_timeout=connect_timeout)
        self.incoming = IncomingRouter(
            link, self.subscriptions, self.publishes, self.auth, max_frame_bytes=max_frame_bytes,
            max_future_skew=max_future_skew, verifier=verifier,
            failed_events=failed_events if failed_events is not None else FailedEvents(), verify_budget=verify_budget)
        self.connection = RelayConnection(
            link, self.incoming, on_open=self._opened, on_lost=self.auth.cancel, on_give_up=self.publishes.fail_all,
            proof_key=proof_key, max_frame_bytes=max_frame_bytes, reconnect=reconnect, backoff_base=backoff_base,
            backoff_max=backoff_max, stable_after=stable_after, connect_timeout=connect_timeout,
            ping_interval=ping_interval, frame_budget=frame_budget, health=health,
            penalty_base=penalty_base, penalty_max=penalty_max)

    def __repr__(self) -> str:
        return f"RelayClient({self.url!r}, state={self.state.value})"

    def _opened(self) -> None:
        """A new connection is up: a fresh NIP-42 state, then everything that must survive a reconnect, in order."""
        self.auth.reset()
        self.subscriptions.resend()
        self.publishes.resend()

    # --- what it shows ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.link.url

    @property
    def state(self) -> ConnectionState:
        return self.link.state

    @property
    def connected(self) -> bool:
        return self.link.connected

    @property
    def authenticated(self) -> bool:
        return self.auth.authenticated

    @property
    def last_error(self) -> str:
        return self.link.last_error

    @property
    def proof_key(self) -> ProofKey | None:
        return self.connection.proof_key

    @property
    def refusals(self) -> int:
        """Connections hung up on at once: the server did not prove it holds ``proof_key``."""
        return self.connection.refusals

    @property
    def connection_count(self) -> int:
        """Successful handshakes so far."""
        return self.connection.connection_count

    @property
    def frames_received(self) -> int:
        """Every frame read from this relay, over all connections."""
        return self.connection.frames_received

    @property
    def disconnects(self) -> Counter[str]:
        """Our hang-ups on this relay, by main invalid reason."""
        return self.connection.disconnects

    @property
    def dropped(self) -> Counter[str]:
        """Frames and events dropped, by reason."""
        return self.incoming.dropped

    @property
    def notices(self) -> deque[str]:
        """The relay's last NOTICEs, as sent."""
        return self.incoming.notices

    @property
    def failed_events(self) -> FailedEvents:
        return self.incoming.failed_events

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start connecting in the background (returns at once)."""
        self.connection.start()

    async def connect(self, timeout: float = 5.0) -> None:
        """Connect (or wait for the background connection); raise :class:`RelayError` on failure.

        Fails as soon as the current attempt fails; with ``reconnect`` the client keeps trying
        in the background.
        """
        self.start()
        deadline = asyncio.get_running_loop().time() + timeout
        before = self.connection_count
        # Success means the handshake happened, even if the relay hung up again right after.
        await self.link.wait_for(
            lambda: self.state is not ConnectionState.CONNECTING or self.connection_count > before, deadline
        )
        if not (self.connected or self.connection_count > before):
            why = self.last_error or f"no connection within {timeout:g}s"
            raise RelayError(f"cannot connect to {self.url}: {why}")

    async def close(self) -> None:
        """Close for good: stop reconnecting, fail waiting publishes, end subscriptions."""
        await self.connection.stop()
        self.subscriptions.close_all("client closed")
        self.publishes.fail_all("the client was closed")
        self.link.set_state(ConnectionState.CLOSED)

    async def __aenter__(self) -> RelayClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def retarget(self, url: str, *, proof_key: ProofKey | None = None) -> None:
        """Connect to ``url`` from now on (the same relay came back on another address, e.g. the shared
        embedded relay restarted on a free port): at once if waiting to reconnect, else after the next drop.
        Subscriptions and unanswered publishes are re-sent there as after any reconnect, once the server there
        proves itself as every server of this client must (``proof_key``: a new key to check it with)."""
        self.connection.retarget(url, proof_key=proof_key)

    # --- requests -----------------------------------------------------------------------------
    async def publish(self, event: Event, timeout: float = 5.0) -> RelayVerdict:
        """Send ``event`` and wait for the relay's OK (:meth:`.Publishes.publish`). Never raises for relay problems."""
        return await self.publishes.publish(event, timeout)

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
        """Open a live subscription, re-sent after every reconnect (:meth:`.Subscriptions.subscribe`)."""
        return self.subscriptions.subscribe(filters, on_event, on_eose=on_eose, on_closed=on_closed,
                                            on_dropped=on_dropped, sub_id=sub_id)

    def forget_subscription(self, sub: Subscription, reason: str) -> None:
        self.subscriptions.forget_subscription(sub, reason)

    async def query_result(self, filters: Sequence[Mapping[str, Any]], timeout: float = 5.0, *,
                           max_bytes: int | None = None) -> QueryResult:
        """Stored events matching ``filters`` until EOSE, CLOSED or ``timeout``, newest first, at most ``max_bytes``
        (:meth:`.Subscriptions.query_result`)."""
        return await self.subscriptions.query_result(filters, timeout, max_bytes=max_bytes)

    async def query(self, filters: Sequence[Mapping[str, Any]], timeout: float = 5.0) -> list[Event]:
        """The events of :meth:`query_result` (possibly partial when the relay did not finish)."""
        return await self.subscriptions.query(filters, timeout)
