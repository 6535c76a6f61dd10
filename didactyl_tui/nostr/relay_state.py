"""What the three halves of :class:`~.relay.RelayClient` (connection, incoming, requests) use of one another.

The client's state lives in :class:`~.relay.RelayClient` (``relay.py``); its connection (``relay_connection.py``),
its handling of incoming frames (``relay_incoming.py``) and its requests (``relay_requests.py``) are written as
separate classes that it inherits, and each reads and writes that state. This protocol names every attribute and
method one half takes from the client or from another half, with its type. It is their base for the type checker
only (at run time they derive from ``object``): the checker reads each half against it, checks the client's
assignments against these types, and refuses to instantiate a ``RelayClient`` that lacks one of the methods.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

    from .event import Event
    from .keys import SecretKey
    from .messages import ClientMessage
    from .relay_guard import FailedEvents, FrameHealth, RecentIds, TokenBucket
    from .relay_proof import ProofKey
    from .results import ConnectionState
    from .signer import Signer
    from .subscription import Subscription


class RelayState:
    # Settings (RelayClient.__init__'s arguments).
    url: str
    proof_key: ProofKey | None
    auth_key: SecretKey | Signer | None
    max_frame_bytes: int
    reconnect: bool
    backoff_base: float
    backoff_max: float
    stable_after: float
    connect_timeout: float
    ping_interval: float | None
    max_future_skew: float | None
    verifier: Callable[[str, bytes, bytes], bool]
    failed_events: FailedEvents
    penalty_base: float
    penalty_max: float

    # What it counts and shows.
    refusals: int
    frames_received: int
    disconnects: Counter[str]
    dropped: Counter[str]
    notices: deque[str]
    last_error: str
    connection_count: int

    # The connection and what waits on it.
    _verify_budget: TokenBucket
    _frame_budget: TokenBucket
    _health: FrameHealth
    _penalties: int
    _penalized: bool
    _closed_subs: RecentIds
    _state: ConnectionState
    _subs: dict[str, Subscription]
    _pending: dict[str, asyncio.Future[tuple[bool | None, str]]]
    _pending_events: dict[str, Event]
    _waiters: Counter[str]
    _ws: ClientConnection | None
    _out: asyncio.Queue[str] | None
    _closing: bool
    _challenge: str | None
    _auth_task: asyncio.Task[tuple[bool, str]] | None
    _moved: asyncio.Event
    _authed: bool

    @property
    @abstractmethod
    def connected(self) -> bool: ...

    # relay.py
    @abstractmethod
    def _set_state(self, state: ConnectionState) -> None: ...
    @abstractmethod
    def _notify(self) -> None: ...
    @abstractmethod
    async def _wait_for(self, predicate: Callable[[], bool], deadline: float) -> bool: ...
    @abstractmethod
    async def _ready(self, deadline: float) -> bool: ...
    @abstractmethod
    def _enqueue(self, message: ClientMessage) -> bool: ...
    @abstractmethod
    def _fail_pending(self, reason: str) -> None: ...
    @abstractmethod
    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...

    # relay_incoming.py, used by the connection
    @abstractmethod
    def _on_frame(self, data: bytes) -> str | None: ...

    # relay_requests.py, used by incoming
    @abstractmethod
    async def _auth_then_resubscribe(self, sub: Subscription, closed_reason: str) -> None: ...
