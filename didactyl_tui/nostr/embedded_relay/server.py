"""The embedded relay: a loopback websockets Nostr relay over a SQLite store, bounded everywhere.

NIP-01 (EVENT/REQ/CLOSE, OK/EOSE/CLOSED/NOTICE), NIP-11 (information document over HTTP on the
same port) and NIP-42 (AUTH, when ``require_auth``). It runs as its own process per data dir
(:mod:`.process`; alone in the foreground, :mod:`.foreground`), so a hostile client can slow the relay but never the
app's UI.

Answers to EVENT, where NIP-01 leaves room:

* a repeat of a stored event: ``OK true "duplicate: already have this event"``;
* a replaceable/addressable version older than the stored one (or an equal ``created_at`` with a
  higher id): not stored, ``OK false "replaced: have a newer version of this event"``. NIP-01 has
  no prefix for this case; ``replaced:`` is what strfry answers and clients already recognize it.
  ``false`` because the event was not stored, so a client never counts it as saved;
* a bad id or signature: ``OK false "invalid: ..."``; kind 22242 is refused in EVENT (it belongs in
  an AUTH message and must never be stored or broadcast);
* ``created_at`` more than 15 minutes ahead (``max_future_seconds``): ``OK false "invalid: ..."`` —
  such an event would otherwise win every replacement until its date (strfry does the same);
* with an allow-list (``allowed_writers``): events by other keys get ``OK false "blocked: ..."``,
  except kind 1059 gift wraps whose ``p`` tag names one of ``gift_wrap_recipients``;
* over a rate limit ``rate-limited: ...``; over the database quota ``error: ...storage quota...``.

Every bound is a field of :class:`RelayLimits` (documented under [relays.embedded] in the config).
Deletion (NIP-09) and expiration (NIP-40) are not implemented: kind 5 is stored as a regular event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import logging
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from ...errors import RelayError
from ...freed_memory import release_freed_memory
from ..event import Event
from ..filters import validate_filter
from .admission import ConnectionGate, is_loopback_origin
from .limits import AuthorMeters, RelayLimits, connection_cap
from .peer import OutputBudget, Peer, dumps
from .protocol import MAX_SUB_ID_LENGTH, RelayProtocol
from .store import EventReader, EventStore
from .wal import Checkpointer
from .writer import BatchWriter

log = logging.getLogger(__name__)

T = TypeVar("T")

SWEEP_INTERVAL_S = 5.0


def _software_version() -> str:
    try:
        return metadata.version("didactyl-tui")
    except metadata.PackageNotFoundError:
        return "0"


class EmbeddedRelay(RelayProtocol):
    """A Nostr relay on ``host:port`` (port 0 picks a free one) stored in ``db_path``.

    ``limits`` holds every bound (a :class:`RelayLimits`, or a mapping of its fields, as JSON carries it
    to a relay process). ``allowed_writers`` (hex pubkeys) turns on the allow-list; None: anyone writes.
    """

    def __init__(
        self,
        db_path: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        limits: RelayLimits | Mapping[str, Any] | None = None,
        require_auth: bool = False,
        name: str = "didactyl embedded relay",
        db_busy_timeout: float = 5.0,
        max_future_seconds: int | None = 15 * 60,
        allowed_writers: Collection[str] | None = None,
        gift_wrap_recipients: Collection[str] = (),
        compression: bool = False,
    ) -> None:
        self.limits = _as_limits(limits)
        self.db_path = Path(db_path)
        self.host = host
        self.port = port
        self.require_auth = require_auth
        self.name = name
        # An event dated far ahead would win every NIP-01 replacement until that date comes.
        self.max_future_seconds = max_future_seconds
        self.db_busy_timeout = db_busy_timeout  # how long a save waits for a lock held by another process
        self.allowed_writers = None if allowed_writers is None else frozenset(k.lower() for k in allowed_writers)
        self.gift_wrap_recipients = frozenset(k.lower() for k in gift_wrap_recipients)
        # permessage-deflate off by default: on loopback it costs CPU and saves nothing (bench/relay_bench.py).
        self.compression = compression
        self._server: Server | None = None
        self._store: EventStore | None = None
        self._reader: EventReader | None = None
        self._checkpointer: Checkpointer | None = None
        self._writer: BatchWriter | None = None
        self._write_pool: ThreadPoolExecutor | None = None
        self._read_pool: ThreadPoolExecutor | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._peers: set[Peer] = set()
        self._filters_total = 0
        self._budget = OutputBudget(self.limits.max_output_bytes_total)
        self._author_meters = AuthorMeters(self.limits)
        self._gate = ConnectionGate(self.limits.max_connections, self.limits.max_connections_per_ip)

    def set_access(self, allowed_writers: Collection[str] | None, gift_wrap_recipients: Collection[str]) -> None:
        """Change who may write, at once (a reload): the next event is judged by the new lists."""
        self.allowed_writers = None if allowed_writers is None else frozenset(k.lower() for k in allowed_writers)
        self.gift_wrap_recipients = frozenset(k.lower() for k in gift_wrap_recipients)

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def connections(self) -> int:
        """Open websocket connections (the shared relay process exits after a while with none)."""
        return len(self._peers)

    def describe_clients(self, limit: int = 5) -> str:
        """Where up to ``limit`` of the open connections come from (``host:port, ...``), for a log line."""
        from ..relay_proof import endpoint  # the relay proof's way of writing an address (IPv6 in brackets)

        return ", ".join(endpoint(peer.ws.remote_address) for peer in itertools.islice(self._peers, limit))

    async def start(self) -> None:
        if self._server is not None:
            return
        self._gate.max_connections = connection_cap(self.limits.max_connections)
        # One thread owns the writing connection (writes are serialized), another the reading one.
        self._write_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedded-relay-write")
        self._read_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedded-relay-read")
        try:
            await self._open_store()
        except (sqlite3.Error, OSError) as exc:
            await self._close_store()
            raise RelayError(f"cannot open the relay database {self.db_path}: {exc}") from exc
        try:
            self._server = await serve(
                self._handle,
                self.host,
                self.port,
                process_request=self._process_request,
                process_response=self._process_response,
                # Frames up to twice the limit are read and answered with a clear reason;
                # beyond that websockets closes the connection (1009, message too big).
                max_size=2 * self.limits.max_frame_bytes,
                max_queue=4,  # frames read ahead per connection: bounded memory, back-pressure on TCP
                compression="deflate" if self.compression else None,
                close_timeout=1.0,  # stop() must not wait long on a client that ignores the close
            )
        except OSError as exc:
            await self._close_store()
            raise RelayError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        log.info("embedded relay listening on %s (db %s)", self.url, self.db_path)

    async def _open_store(self) -> None:
        store = await self._run_db(
            EventStore, self.db_path, max_limit=self.limits.max_limit,
            busy_timeout_ms=int(self.db_busy_timeout * 1000), auto_checkpoint=False,
            max_wal_bytes=self.limits.max_wal_bytes,
        )
        self._store = store
        self._reader = await self._run_reader(
            EventReader, self.db_path, max_limit=self.limits.max_limit,
            busy_timeout_ms=int(self.db_busy_timeout * 1000),
        )
        self._checkpointer = Checkpointer(self.db_path)
        self._writer = BatchWriter(store, self._run_db, self._admit_verified, wal=self._checkpointer)
        self._writer.start()

    async def stop(self) -> None:
        server, self._server = self._server, None
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if server is not None:
            server.close()
            await server.wait_closed()
        self._peers.clear()
        self._filters_total = 0
        await self._close_store()

    async def _close_store(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.stop()
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            await asyncio.to_thread(checkpointer.stop)
        loop = asyncio.get_running_loop()
        for conn, pool in ((self._reader, self._read_pool), (self._store, self._write_pool)):
            if pool is None:
                continue
            if conn is not None:
                await loop.run_in_executor(pool, conn.close)
            pool.shutdown(wait=False)
        self._reader = self._store = None
        self._read_pool = self._write_pool = None

    async def __aenter__(self) -> EmbeddedRelay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run_db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self._run_in(self._write_pool, fn, *args, **kwargs)

    async def _run_reader(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self._run_in(self._read_pool, fn, *args, **kwargs)

    @staticmethod
    async def _run_in(pool: ThreadPoolExecutor | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if pool is None:
            raise RelayError("the embedded relay is not running")
        return await asyncio.get_running_loop().run_in_executor(pool, lambda: fn(*args, **kwargs))

    # --- helpers for tests, benchmarks and the app ------------------------------------------
    async def query(self, filters: Sequence[Mapping[str, Any]]) -> list[Event]:
        """Stored events matching ``filters`` (newest first), read straight from the store."""
        store = self._require_store()
        return await self._run_db(store.query, [validate_filter(f) for f in filters])

    async def count(self) -> int:
        store = self._require_store()
        return await self._run_db(store.count)

    async def used_bytes(self) -> int:
        """Bytes the stored events occupy (what the quota counts)."""
        store = self._require_store()
        return await self._run_db(store.used_bytes)

    def _require_store(self) -> EventStore:
        if self._store is None:
            raise RelayError("the embedded relay is not running")
        return self._store

    def info_document(self) -> dict[str, Any]:
        """The NIP-11 relay information document."""
        nips = [1, 11] + ([42] if self.require_auth else [])
        lim = self.limits
        return {
            "name": self.name,
            "description": "Loopback relay embedded in didactyl-tui, stored in SQLite.",
            "software": "didactyl-tui",
            "version": _software_version(),
            "supported_nips": nips,
            "limitation": {
                "max_message_length": lim.max_frame_bytes,
                "max_subscriptions": lim.max_subscriptions,
                "max_filters": lim.max_filters,
                "max_limit": lim.max_limit,
                "max_subid_length": MAX_SUB_ID_LENGTH,
                "auth_required": self.require_auth,
                "payment_required": False,
                "restricted_writes": self.require_auth or self.allowed_writers is not None,
                **({"created_at_upper_limit": self.max_future_seconds} if self.max_future_seconds else {}),
            },
        }

    # --- HTTP: NIP-11, and the cross-origin guard ----------------------------------------------
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            origin = request.headers.get("Origin")
            # A browser always sends Origin: a web page must never reach the agent's relay.
            if origin is not None and not is_loopback_origin(origin):
                return connection.respond(HTTPStatus.FORBIDDEN, "cross-origin websocket connections are refused\n")
            # Refused before the upgrade: the socket is closed at once, not after a close handshake.
            if not self._gate.admit(connection, self._peers):
                return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections; try again later\n")
            return None
        if "application/nostr+json" in request.headers.get("Accept", ""):
            response = connection.respond(HTTPStatus.OK, dumps(self.info_document()))
            _set_headers(
                response.headers,
                {
                    "Content-Type": "application/nostr+json",
                    "Access-Control-Allow-Origin": "*",
                    "Access-Control-Allow-Headers": "*",
                    "Access-Control-Allow-Methods": "GET",
                },
            )
            return response
        return connection.respond(
            HTTPStatus.OK,
            f"{self.name}: connect with a Nostr client to {self.url}, "
            "or send Accept: application/nostr+json for its NIP-11 document.\n",
        )

    def identity_headers(self, connection: ServerConnection, request: Request) -> dict[str, str]:
        """Headers proving who this relay is, added to its answer to ``request`` (once per connection, in the
        handshake). A plain relay proves nothing; the shared relay process does (:mod:`.process`)."""
        return {}

    def _process_response(self, connection: ServerConnection, request: Request, response: Response) -> None:
        headers = self.identity_headers(connection, request)
        if headers:
            _set_headers(response.headers, headers)

    # --- connections ------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        peer = Peer(ws, self.limits, self._budget)
        self._gate.opened(ws)  # admitted by _process_request, which every upgrade goes through
        self._peers.add(peer)
        writer = asyncio.create_task(peer.write_loop())
        try:
            if self.require_auth:
                peer.send(["AUTH", peer.challenge])
            while await peer.wait_for_room():
                try:
                    data = await ws.recv(decode=False)
                except ConnectionClosed:
                    break
                try:
                    await self._on_message(peer, data)
                except Exception:  # a bug here must not take the connection down silently
                    log.exception("embedded relay failed to handle a message")
                    peer.send(["NOTICE", "error: internal error while handling the message"])
        finally:
            self._peers.discard(peer)
            self._filters_total -= peer.close_subscriptions()
            peer.closing = True
            writer.cancel()

    async def _sweep(self) -> None:
        """Close connections that hold no subscription and have been silent for ``idle_timeout_s``."""
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            now = time.monotonic()
            for peer in list(self._peers):
                if not peer.subs and now - peer.last_active > self.limits.idle_timeout_s:
                    peer.drop("idle timeout")


def _as_limits(limits: RelayLimits | Mapping[str, Any] | None) -> RelayLimits:
    if limits is None:
        return RelayLimits()
    if isinstance(limits, RelayLimits):
        return limits
    known = {f.name for f in dataclasses.fields(RelayLimits)}
    unknown = sorted(set(limits) - known)
    if unknown:
        raise RelayError(f"unknown embedded relay limits: {', '.join(unknown)}")
    return RelayLimits(**limits)


def _set_headers(headers: Headers, values: dict[str, str]) -> None:
    for key, value in values.items():
        if key in headers:
            del headers[key]  # Headers is a multi-dict: assignment would add a second value
        headers[key] = value


def freeze_startup_objects() -> None:
    """For a relay process, once it listens: what start-up allocated (modules, the store, the server)
    lives as long as the process, so it leaves the collector's sight (``gc.freeze``). An occasional
    full collection then walks only what serving allocates (~1 ms, not ~20 ms while a publisher
    waits for its OK). What start-up freed goes back to the system. Not for a relay inside another program:
    that program's objects would freeze too."""
    gc.collect()
    gc.freeze()
    release_freed_memory()
