"""What every part of a :class:`~.relay.RelayClient` sees of its connection: the address, the state, a way to send.

The connection (:mod:`.relay_connection`) drives the link: it opens it with a fresh outgoing queue when a handshake
succeeds and shuts it when the connection ends, moves it to a new address, and says what went wrong last. The other
parts (publishes, subscriptions, NIP-42) read it, send through it and wait on it; none of them holds the socket.

Waiters wait on a *pulse*: an event set and replaced on every change they care about (a state change, an AUTH
challenge), so each re-checks its own condition. (Waits use ``asyncio.timeout``, never ``asyncio.wait_for``: on
Python 3.11 ``wait_for`` can swallow a cancellation that races with its result.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import urlsplit

from ..errors import RelayError
from .messages import ClientMessage
from .results import ConnectionState
from .subscription import call_safely

StateCallback = Callable[[str, ConnectionState], None]


def relay_url(url: str) -> str:
    """``url`` when it is a websocket URL with a host; else :class:`RelayError`."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise RelayError(f"not a relay URL (expected ws:// or wss://): {url!r}")
    return url


class RelayLink:
    """One relay's address and connection state, its outgoing queue while connected, and its last error."""

    def __init__(self, url: str, on_state: StateCallback | None = None) -> None:
        self._url = relay_url(url)
        self._on_state = on_state
        self._state = ConnectionState.DISCONNECTED
        self._out: asyncio.Queue[str] | None = None  # the current connection's outgoing frames
        self._pulse = asyncio.Event()  # set and replaced on every change waiters care about
        self._last_error = ""

    @property
    def url(self) -> str:
        return self._url

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def connected(self) -> bool:
        return self._state is ConnectionState.CONNECTED

    @property
    def last_error(self) -> str:
        """Why the last connection attempt failed or the last connection ended ("" while one is up)."""
        return self._last_error

    # --- what the connection does to it --------------------------------------------------------
    def set_state(self, state: ConnectionState) -> None:
        if state is self._state:
            return
        self._state = state
        self.notify()
        if self._on_state is not None:
            call_safely(self._on_state, self._url, state)

    def report(self, error: str) -> None:
        self._last_error = error

    def move(self, url: str) -> None:
        """The relay is at ``url`` from now on (checked first: a bad URL changes nothing)."""
        self._url = relay_url(url)

    def open(self, out: asyncio.Queue[str]) -> None:
        """A new connection writes what is sent from now on to ``out``."""
        self._out = out

    def shut(self) -> None:
        self._out = None

    # --- what the other parts do with it -------------------------------------------------------
    def send(self, message: ClientMessage) -> bool:
        """Queue ``message`` on the current connection; False (nothing queued) when not connected."""
        if self._out is None or self._state is not ConnectionState.CONNECTED:
            return False
        self._out.put_nowait(message.to_json())
        return True

    def notify(self) -> None:
        """Wake every waiter to check its condition again."""
        pulse, self._pulse = self._pulse, asyncio.Event()
        pulse.set()

    async def wait_for(self, predicate: Callable[[], bool], deadline: float) -> bool:
        """Wait until ``predicate()`` holds (checked on every pulse); False when ``deadline`` (loop time) passes."""
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

    async def ready(self, deadline: float) -> bool:
        """Connected now, or once the connection attempt in progress succeeds (before deadline).

        A relay that is down (backing off between attempts) answers at once: callers get
        NOT_CONNECTED instead of waiting for a relay that may be gone for a long time.
        """
        if self._state is ConnectionState.CONNECTING:
            await self.wait_for(lambda: self._state is not ConnectionState.CONNECTING, deadline)
        return self._state is ConnectionState.CONNECTED
