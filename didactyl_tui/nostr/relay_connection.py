"""The connection of :class:`~.relay.RelayClient`: the websocket, kept up with backoff and penalties; read, write.

The connection runs in one background task that reconnects with exponential backoff and jitter; on every new
connection it opens the :class:`~.relay_link.RelayLink` (what the other parts send through) and calls its
``on_open`` (which re-sends every live subscription and every publish still waiting for its OK). The read loop hands
each frame to the :class:`~.relay_incoming.IncomingRouter`, yields to the event loop every few milliseconds of work
and stops reading while a budget is spent; a relay whose recent frames are mostly invalid is hung up on and retried
only after a penalty that doubles each time.

A client given a ``proof_key`` (the data dir's own embedded relay) sends a fresh nonce in every upgrade request and
checks the server's proof (:mod:`.relay_proof`) before the connection is used: a server that does not prove it
holds the key — whatever answers on the URL once the relay is gone — is hung up on at once, before a single frame
(subscription, event, AUTH) is sent, and counted in ``refusals``. Every connection is checked, the first and
each reconnect alike: there is no other way to a connected state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI

from ..errors import RelayError
from . import relay_proof
from .relay_guard import FrameHealth, TokenBucket
from .relay_incoming import DROP_OVERSIZED, IncomingRouter
from .relay_link import RelayLink
from .results import ConnectionState

log = logging.getLogger("didactyl_tui.nostr.relay")

READ_SLICE_S = 0.004  # the read loop yields to the event loop after this much work in a row


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


class RelayConnection:
    """The websocket to one relay, kept up (``reconnect``) until :meth:`stop`.

    Hooks, run on the event loop: ``on_open()`` right after each new connection is up (the link connected),
    ``on_lost()`` when it ends, ``on_give_up(reason)`` when it ended for good (no ``reconnect``).
    Reading stops while ``frame_budget`` (one token a frame) or the router's signature checks
    (:meth:`~.relay_incoming.IncomingRouter.verify_wait`) are in debt.
    """

    def __init__(
        self,
        link: RelayLink,
        incoming: IncomingRouter,
        *,
        on_open: Callable[[], None],
        on_lost: Callable[[], None],
        on_give_up: Callable[[str], None],
        proof_key: relay_proof.ProofKey | None,
        max_frame_bytes: int,
        reconnect: bool,
        backoff_base: float,
        backoff_max: float,
        stable_after: float,
        connect_timeout: float,
        ping_interval: float | None,
        frame_budget: TokenBucket,
        health: FrameHealth,
        penalty_base: float,
        penalty_max: float,
    ) -> None:
        if not 0 < penalty_base <= penalty_max:
            raise RelayError(f"{link.url}: penalty_base must be > 0 and at most penalty_max")
        self._link = link
        self._incoming = incoming
        self._on_open, self._on_lost, self._on_give_up = on_open, on_lost, on_give_up
        # The server must prove in every handshake that it holds this key (the data dir's own embedded relay), or
        # it is hung up on before any frame is sent; None: any server at the URL is used (a public relay).
        self.proof_key = proof_key
        self.max_frame_bytes = max_frame_bytes
        self.reconnect = reconnect
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.stable_after = stable_after  # a connection that lived this long resets the backoff
        self.connect_timeout = connect_timeout
        self.ping_interval = ping_interval
        self.frame_budget = frame_budget
        self.health = health
        self.penalty_base = penalty_base
        self.penalty_max = penalty_max
        self.refusals = 0  # connections hung up on at once: the server did not prove it holds proof_key
        self.frames_received = 0  # every frame read from this relay, over all connections
        self.connection_count = 0  # successful handshakes so far
        self.disconnects: Counter[str] = Counter()  # our hang-ups on this relay, by main invalid reason
        self._penalties = 0  # hang-ups for invalid frames in a row (reset by a healthy connection)
        self._penalized = False  # the connection that just ended was ended by us for invalid frames
        self._ws: ClientConnection | None = None
        self._runner: asyncio.Task[None] | None = None
        self._closing = False
        self._moved = asyncio.Event()  # set by retarget(): skip the backoff wait, connect to the new URL

    def start(self) -> None:
        """Start connecting in the background (returns at once; nothing new while a runner is alive)."""
        if self._closing:
            raise RelayError(f"{self._link.url}: this client was closed")
        if self._runner is None or self._runner.done():
            self._link.set_state(ConnectionState.CONNECTING)
            self._runner = asyncio.get_running_loop().create_task(self._run(), name=f"relay {self._link.url}")

    async def stop(self) -> None:
        """Close for good: hang up politely (bounded) and stop reconnecting."""
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

    def backoff_delay(self, attempt: int) -> float:
        """How long to wait before connection attempt ``attempt`` + 1 (0-based; jittered, at most ``backoff_max``)."""
        delay = min(self.backoff_max, self.backoff_base * 2 ** min(attempt, 30))
        return random.uniform(delay / 2, delay)  # jitter: relays restarted together are not hit together

    def _penalty_delay(self) -> float:
        if not self._penalties:
            return 0.0
        return min(self.penalty_max, self.penalty_base * 2 ** min(self._penalties - 1, 30))

    async def _run(self) -> None:
        link = self._link
        attempt = 0
        while not self._closing:
            link.set_state(ConnectionState.CONNECTING)
            nonce = secrets.token_hex(relay_proof.NONCE_BYTES)
            url, proof_key = link.url, self.proof_key  # a retarget() meanwhile does not change this attempt
            try:
                ws = await websockets.connect(
                    url,
                    additional_headers={relay_proof.CHALLENGE_HEADER: nonce} if proof_key is not None else None,
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
                link.report(f"invalid relay URL: {exc}")
                link.set_state(ConnectionState.DISCONNECTED)
                return
            except Exception as exc:
                link.report(_describe(exc, self.connect_timeout))
                log.debug("relay %s: connect failed: %s", link.url, link.last_error)
            else:
                refusal = self._unproven(ws, url, proof_key, nonce)
                if refusal:
                    self._refuse(ws, refusal)
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
                self._on_give_up(f"connection lost: {link.last_error}" if link.last_error else "disconnected")
                link.set_state(ConnectionState.DISCONNECTED)
                return
            link.set_state(ConnectionState.BACKOFF)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), max(self.backoff_delay(attempt), self._penalty_delay()))
            attempt = 0 if self._moved.is_set() else attempt + 1
            self._moved.clear()

    def _unproven(self, ws: ClientConnection, url: str, proof_key: relay_proof.ProofKey | None, nonce: str) -> str:
        """Why this new connection is not to be used ("" when it is): with a ``proof_key``, the server must prove in
        its handshake answer, for this nonce and these endpoints, that it holds the key; and it must be the server at
        the URL's port (not one a redirect led to)."""
        if proof_key is None:
            return ""
        local, remote = ws.local_address, ws.remote_address
        if not (isinstance(local, tuple) and isinstance(remote, tuple)):
            return f"{url} is not a TCP connection"
        client, server = relay_proof.endpoint(local), relay_proof.endpoint(remote)
        where = f"the server on {server}"
        wanted_port = urlsplit(url).port or (443 if url.startswith("wss:") else 80)
        if remote[1] != wanted_port:
            return f"{where} is not at {url} (redirected)"
        headers = ws.response.headers if ws.response is not None else {}
        try:
            relay_proof.check(proof_key, nonce, client=client, server=server,
                              instance=headers.get(relay_proof.INSTANCE_HEADER),
                              state=headers.get(relay_proof.STATE_HEADER), proof=headers.get(relay_proof.PROOF_HEADER))
        except relay_proof.ProofError as exc:
            return f"{where} did not prove it is this data dir's embedded relay ({exc})"
        return ""

    def _refuse(self, ws: ClientConnection, refusal: str) -> None:
        """Hang up on an unproven server before anything is sent (no close frame either: it gets nothing)."""
        ws.transport.abort()
        self.refusals += 1
        self._link.report(f"{refusal}: nothing was sent to it")
        log.warning("relay %s: %s", self._link.url, self._link.last_error)

    def retarget(self, url: str, *, proof_key: relay_proof.ProofKey | None = None) -> None:
        """Connect to ``url`` from now on (the same relay came back on another address, e.g. the shared
        embedded relay restarted on a free port): at once if waiting to reconnect, else after the next drop.
        Subscriptions and unanswered publishes are re-sent there as after any reconnect, once the server there
        proves itself as every server of this client must (``proof_key``: a new key to check it with)."""
        self._link.move(url)
        if proof_key is not None:
            self.proof_key = proof_key
        self._moved.set()

    async def _serve_connection(self, ws: ClientConnection) -> None:
        link = self._link
        out: asyncio.Queue[str] = asyncio.Queue()
        self._ws = ws
        link.open(out)
        link.report("")
        self.connection_count += 1
        writer = asyncio.get_running_loop().create_task(self._write_loop(ws, out))
        link.set_state(ConnectionState.CONNECTED)
        # Everything that must survive a reconnect is re-sent, in order, before new traffic.
        self._on_open()
        self.health.reset()
        try:
            await self._read_loop(ws)
        finally:
            writer.cancel()
            self._ws = None
            link.shut()
            self._on_lost()
            link.set_state(ConnectionState.DISCONNECTED)

    async def _read_loop(self, ws: ClientConnection) -> None:
        busy = 0.0  # seconds of work since we last gave the event loop a turn
        while True:
            try:
                data = await ws.recv(decode=False)
            except ConnectionClosed as exc:
                if not self._penalized:
                    self._link.report(self._describe_close(exc))
                return
            started = time.perf_counter()
            self.frames_received += 1
            self.frame_budget.take()
            try:
                # Every drop reason the router returns counts against the relay's health; repeats and
                # unknown subscriptions (a race with our own CLOSE) do not.
                self.health.note(self._incoming.handle(data))
            except Exception:  # a bug in our handling must not end the connection
                log.exception("relay %s: failed to handle a frame", self._link.url)
                self._incoming.drop("internal_error")
            if (reason := self.health.failing()) is not None:
                self._hang_up(ws, reason)
                return
            busy += time.perf_counter() - started
            # Frames already buffered come back from recv() without a turn of the event loop: give
            # it one every few ms of work, and stop reading while a budget (frames, signature
            # checks) is spent: the relay's socket then pushes back instead of us dropping events.
            if (wait := max(self._incoming.verify_wait(), self.frame_budget.wait_time())) > 0:
                await asyncio.sleep(wait)
                busy = 0.0
            elif busy >= READ_SLICE_S:
                await asyncio.sleep(0)
                busy = 0.0

    def _hang_up(self, ws: ClientConnection, reason: str) -> None:
        share = sum(self.health.invalid.values()) / self.health.window
        self.disconnects[reason] += 1
        self._penalized = True
        self._link.report(f"disconnected: {share:.0%} of the last {self.health.window} messages were invalid "
                          f"(mostly {reason})")
        log.warning("relay %s: %s", self._link.url, self._link.last_error)
        ws.transport.abort()  # a flooding relay would not answer a polite close in time anyway

    def _describe_close(self, exc: ConnectionClosed) -> str:
        if exc.sent is not None and exc.sent.code == 1009:  # websockets refused a too-big frame
            self._incoming.drop(DROP_OVERSIZED)
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
