"""The connection of :class:`~.relay.RelayClient`: connect, reconnect with backoff and penalties, read, write.

The connection runs in one background task that reconnects with exponential backoff and jitter and
then re-sends every live subscription and every publish still waiting for its OK. The read loop
yields to the event loop every few milliseconds of work and stops reading while a budget is spent.

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
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI

from ..errors import RelayError
from . import relay_proof
from .messages import ClientEvent, ClientReq
from .relay_incoming import DROP_OVERSIZED
from .results import ConnectionState

if TYPE_CHECKING:  # the client's state, as each half uses it: declared for the type checker (relay_state.py)
    from .relay_state import RelayState
else:
    RelayState = object

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


class ConnectionMixin(RelayState):
    """The connection half of :class:`~.relay.RelayClient` (state lives there, declared in relay_state.py)."""

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
            nonce = secrets.token_hex(relay_proof.NONCE_BYTES)
            url, proof_key = self.url, self.proof_key  # a retarget() meanwhile does not change this attempt
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
                self.last_error = f"invalid relay URL: {exc}"
                self._set_state(ConnectionState.DISCONNECTED)
                return
            except Exception as exc:
                self.last_error = _describe(exc, self.connect_timeout)
                log.debug("relay %s: connect failed: %s", self.url, self.last_error)
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
                self._fail_pending(f"connection lost: {self.last_error}" if self.last_error else "disconnected")
                self._set_state(ConnectionState.DISCONNECTED)
                return
            self._set_state(ConnectionState.BACKOFF)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), max(self._backoff_delay(attempt), self._penalty_delay()))
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
        self.last_error = f"{refusal}: nothing was sent to it"
        log.warning("relay %s: %s", self.url, self.last_error)

    def retarget(self, url: str, *, proof_key: relay_proof.ProofKey | None = None) -> None:
        """Connect to ``url`` from now on (the same relay came back on another address, e.g. the shared
        embedded relay restarted on a free port): at once if waiting to reconnect, else after the next drop.
        Subscriptions and unanswered publishes are re-sent there as after any reconnect, once the server there
        proves itself as every server of this client must (``proof_key``: a new key to check it with)."""
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise RelayError(f"not a relay URL (expected ws:// or wss://): {url!r}")
        self.url = url
        if proof_key is not None:
            self.proof_key = proof_key
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
