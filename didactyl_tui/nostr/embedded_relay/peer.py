"""One websocket connection as the relay sees it: its subscriptions, meters, and a bounded output buffer.

Every message to a client goes through its :class:`Peer` buffer, written by one task per peer so a
broadcast never waits on a slow reader and messages keep their order. The buffer is bounded in bytes,
per connection and for the whole relay (:class:`OutputBudget`): a live event that does not fit closes
the client (strfry does the same to a client that does not read); a stored result waits for room, up
to ``slow_client_timeout_s``, then closes it. Nothing a client refuses to read can grow the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections import deque
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from .limits import Meter, RelayLimits
from .subscriptions import Subscription

log = logging.getLogger(__name__)

CLOSE_TOO_SLOW = 1008
WRITE_BATCH_FRAMES = 128  # frames handed to the socket in one write
WRITE_BATCH_BYTES = 256 * 1024  # policy violation: the client does not read what it asked for


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # built once, not per message


def dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


class OutputBudget:
    """Bytes queued for all clients together."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0


class Peer:
    def __init__(self, ws: ServerConnection, limits: RelayLimits, budget: OutputBudget) -> None:
        self.ws = ws
        self.limits = limits
        address = ws.remote_address
        self.ip: str = address[0] if isinstance(address, tuple) and address else "?"
        self.subs: dict[str, Subscription] = {}
        self.cost = 0  # filter values held by this connection's subscriptions
        self.challenge = secrets.token_hex(16)
        self.authed: set[str] = set()
        self.meter = Meter(limits.events_per_second, limits.events_burst, limits.bytes_per_minute)
        self.last_active = time.monotonic()
        self.last_write: asyncio.Future[Any] | None = None  # the newest of its events still being saved
        self.pending_writes = 0
        self.closing = False
        self._budget = budget
        self._queue: deque[str] = deque()
        self._queued = 0
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._closer: asyncio.Task[None] | None = None
        self._writing = False  # write_loop holds frames taken from the queue, not yet on the socket

    # --- the output buffer -------------------------------------------------------------------
    def _fits(self, size: int) -> bool:
        if not self._queue:
            return True  # one message always fits, however large (it is bounded by max_frame_bytes)
        return (self._queued + size <= self.limits.max_output_bytes
                and self._budget.used + size <= self._budget.limit)

    def _push(self, text: str) -> None:
        self._queue.append(text)
        self._queued += len(text)
        self._budget.used += len(text)
        self._wake.set()

    def send(self, message: list[Any]) -> None:
        """Queue an answer to this client's own message (OK, EOSE, CLOSED, NOTICE). Answers are not
        dropped: the connection stops reading new messages while its buffer is full
        (:meth:`wait_for_room`), so they are bounded by what it had in flight."""
        if not self.closing:
            text = dumps(message)
            if not self._write_now(text):
                self._push(text)

    def _write_now(self, text: str) -> bool:
        """Hand ``text`` to the socket at once when it is this client's only answer due (nothing queued
        or being written, no other event of its being saved) and the socket's buffer is empty: a
        client publishing one event at a time gets its OK without a wake-up of :meth:`write_loop`.
        The OKs of a pipelining client still go out many to a write, in order."""
        ws = self.ws
        if self._queue or self._writing or self.pending_writes or ws.protocol.state is not State.OPEN:
            return False
        transport = ws.transport
        if transport.is_closing() or transport.get_write_buffer_size():
            return False
        ws.protocol.send_text(text.encode())
        ws.send_data()
        return True

    def push_live(self, text: str) -> bool:
        """Queue a live event for a subscription; a client whose buffer is full is closed."""
        if self.closing:
            return False
        if not self._fits(len(text)):
            self.drop("client too slow: its output buffer is full")
            return False
        self._push(text)
        return True

    async def wait_for_room(self) -> bool:
        """Before reading the next message: wait until the buffer is below its limit (back-pressure
        on a client that sends faster than it reads); False if it was closed meanwhile."""
        return await self._await_room(0)

    async def send_waiting(self, text: str) -> bool:
        """Queue a message once there is room (a stored result); False if the client was closed."""
        if not await self._await_room(len(text)):
            return False
        self._push(text)
        return True

    async def _await_room(self, size: int) -> bool:
        deadline = time.monotonic() + self.limits.slow_client_timeout_s
        while not self.closing and not self._fits(size):
            self._room.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                self.drop("client too slow: it does not read its results")
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), min(left, 0.5))
        return not self.closing

    def drop(self, why: str) -> None:
        """Close this client (once) and free its buffer."""
        if self.closing:
            return
        self.closing = True
        log.warning("closing a client (%s): %s", self.ip, why)
        self._release()
        self._closer = asyncio.get_running_loop().create_task(self.ws.close(CLOSE_TOO_SLOW, why[:100]))

    def _release(self) -> None:
        self._budget.used -= self._queued
        self._queued = 0
        self._queue.clear()
        self._room.set()
        self._wake.set()

    async def write_loop(self) -> None:
        try:
            while not self.closing:
                if not self._queue:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                batch = self._take_batch()
                self._room.set()
                self._writing = True
                if len(batch) == 1:
                    await self.ws.send(batch[0])
                else:
                    # One write for many frames (a stored result): websockets' documented pattern for
                    # writing through its protocol, instead of one send() and one syscall per frame.
                    async with self.ws.send_context():
                        protocol = self.ws.protocol
                        for text in batch:
                            protocol.send_text(text.encode())
                        # One write (one syscall) for the batch: send_context's own flush writes frame by frame.
                        chunks = protocol.data_to_send()
                        self.ws.transport.write(b"".join(chunks))
                        if not all(chunks):  # end of stream (never from send_text): close, as websockets would
                            self.ws.transport.close()
                self._writing = False
        except ConnectionClosed:
            pass
        finally:
            self._release()

    def _take_batch(self) -> list[str]:
        batch: list[str] = []
        size = 0
        while self._queue and len(batch) < WRITE_BATCH_FRAMES and size < WRITE_BATCH_BYTES:
            text = self._queue.popleft()
            batch.append(text)
            size += len(text)
        self._queued -= size
        self._budget.used -= size
        return batch

    def close_subscriptions(self) -> int:
        """Forget every subscription; returns how many filters they held."""
        filters = sum(len(s.filters) for s in self.subs.values())
        self.subs.clear()
        self.cost = 0
        return filters
