"""The embedded relay: a loopback websockets Nostr relay over a SQLite store.

NIP-01 (EVENT/REQ/CLOSE, OK/EOSE/CLOSED/NOTICE), NIP-11 (information document over HTTP on the
same port) and NIP-42 (AUTH, when ``require_auth``).

Answers to EVENT, where NIP-01 leaves room:

* a repeat of a stored event: ``OK true "duplicate: already have this event"``;
* a replaceable/addressable version older than the stored one (or an equal ``created_at`` with a
  higher id): not stored, ``OK false "replaced: have a newer version of this event"``. NIP-01 has
  no prefix for this case; ``replaced:`` is what strfry answers and clients already recognize it.
  ``false`` because the event was not stored, so a client never counts it as saved;
* a bad id or signature: ``OK false "invalid: ..."``; kind 22242 is refused in EVENT (it belongs in
  an AUTH message and must never be stored or broadcast);
* ``created_at`` more than 15 minutes ahead (``max_future_seconds``): ``OK false "invalid: ..."`` —
  such an event would otherwise win every replacement until its date (strfry does the same).

Deletion (NIP-09) and expiration (NIP-40) are not implemented: kind 5 is stored as a regular event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from ...errors import NostrError, RelayError
from ..event import Event
from ..filters import Filter, matches_any, validate_filter
from ..kinds import CLIENT_AUTH, is_ephemeral
from .store import EventStore, SaveResult

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_FRAME_BYTES = 512 * 1024
DEFAULT_MAX_SUBSCRIPTIONS = 32
DEFAULT_MAX_FILTERS = 16
DEFAULT_MAX_LIMIT = 5000
MAX_FILTER_VALUES = 1000  # values per filter key; keeps every query far below SQLite's variable limit
MAX_SUB_ID_LENGTH = 64
AUTH_MAX_AGE_S = 600  # NIP-42 suggests ~10 minutes either way
_SEND_QUEUE_SIZE = 10_000


def _software_version() -> str:
    try:
        return metadata.version("didactyl-tui")
    except metadata.PackageNotFoundError:
        return "0"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class _Peer:
    """One websocket connection: its subscriptions, auth state and ordered outgoing queue."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.subs: dict[str, list[Filter]] = {}
        self.challenge = secrets.token_hex(16)
        self.authed: set[str] = set()
        # A queue and one writer task per peer: broadcasting never waits on a slow reader, and
        # messages keep their order (stored events, then EOSE).
        self._queue: asyncio.Queue[str] = asyncio.Queue(_SEND_QUEUE_SIZE)
        self._overflowed = False
        self._closer: asyncio.Task[None] | None = None  # kept so the task is not garbage-collected

    def send(self, message: list[Any] | str) -> None:
        text = message if isinstance(message, str) else _dumps(message)
        try:
            self._queue.put_nowait(text)
        except asyncio.QueueFull:
            if not self._overflowed:
                self._overflowed = True
                log.warning("closing a client that does not read its messages")
                self._closer = asyncio.get_running_loop().create_task(self.ws.close(1008, "client too slow"))

    def send_event(self, sub_id: str, raw_event: str) -> None:
        self.send(f'["EVENT",{_dumps(sub_id)},{raw_event}]')

    async def write_loop(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                await self.ws.send(await self._queue.get())


class EmbeddedRelay:
    """A Nostr relay on ``host:port`` (port 0 picks a free one) stored in ``db_path``."""

    def __init__(
        self,
        db_path: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS,
        max_filters: int = DEFAULT_MAX_FILTERS,
        max_limit: int = DEFAULT_MAX_LIMIT,
        require_auth: bool = False,
        name: str = "didactyl embedded relay",
        db_busy_timeout: float = 5.0,
        max_future_seconds: int | None = 15 * 60,
    ) -> None:
        self.db_path = Path(db_path)
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.max_subscriptions = max_subscriptions
        self.max_filters = max_filters
        self.max_limit = max_limit
        self.require_auth = require_auth
        self.name = name
        # An event dated far ahead would win every NIP-01 replacement until that date comes.
        self.max_future_seconds = max_future_seconds
        self.db_busy_timeout = db_busy_timeout  # how long a save waits for a lock held by another process
        self._server: Server | None = None
        self._store: EventStore | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._peers: set[_Peer] = set()

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

    async def start(self) -> None:
        if self._server is not None:
            return
        # One worker thread owns the SQLite connection: writes are serialized, the loop never blocks.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedded-relay-db")
        try:
            self._store = await self._run_db(
                EventStore,
                self.db_path,
                max_limit=self.max_limit,
                busy_timeout_ms=int(self.db_busy_timeout * 1000),
            )
        except (sqlite3.Error, OSError) as exc:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise RelayError(f"cannot open the relay database {self.db_path}: {exc}") from exc
        try:
            self._server = await serve(
                self._handle,
                self.host,
                self.port,
                process_request=self._process_request,
                # Frames up to twice the limit are read and answered with a clear reason;
                # beyond that websockets closes the connection (1009, message too big).
                max_size=2 * self.max_frame_bytes,
                close_timeout=1.0,  # stop() must not wait long on a client that ignores the close
            )
        except OSError as exc:
            await self._close_store()
            raise RelayError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("embedded relay listening on %s (db %s)", self.url, self.db_path)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        self._peers.clear()
        await self._close_store()

    async def _close_store(self) -> None:
        store, self._store = self._store, None
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if store is not None:
            await asyncio.get_running_loop().run_in_executor(executor, store.close)
        executor.shutdown(wait=False)

    async def __aenter__(self) -> EmbeddedRelay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run_db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._executor is None:
            raise RelayError("the embedded relay is not running")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    # --- helpers for tests, benchmarks and the app ------------------------------------------
    async def query(self, filters: list[Mapping[str, Any]]) -> list[Event]:
        """Stored events matching ``filters`` (newest first), read straight from the store."""
        store = self._require_store()
        return await self._run_db(store.query, [validate_filter(f) for f in filters])

    async def count(self) -> int:
        store = self._require_store()
        return await self._run_db(store.count)

    def _require_store(self) -> EventStore:
        if self._store is None:
            raise RelayError("the embedded relay is not running")
        return self._store

    def info_document(self) -> dict[str, Any]:
        """The NIP-11 relay information document."""
        nips = [1, 11] + ([42] if self.require_auth else [])
        return {
            "name": self.name,
            "description": "Loopback relay embedded in didactyl-tui, stored in SQLite.",
            "software": "didactyl-tui",
            "version": _software_version(),
            "supported_nips": nips,
            "limitation": {
                "max_message_length": self.max_frame_bytes,
                "max_subscriptions": self.max_subscriptions,
                "max_filters": self.max_filters,
                "max_limit": self.max_limit,
                "max_subid_length": MAX_SUB_ID_LENGTH,
                "auth_required": self.require_auth,
                "payment_required": False,
                "restricted_writes": self.require_auth,
                **({"created_at_upper_limit": self.max_future_seconds} if self.max_future_seconds else {}),
            },
        }

    # --- HTTP: NIP-11 -----------------------------------------------------------------------
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return None
        if "application/nostr+json" in request.headers.get("Accept", ""):
            response = connection.respond(HTTPStatus.OK, _dumps(self.info_document()))
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

    # --- websocket --------------------------------------------------------------------------
    async def _handle(self, ws: ServerConnection) -> None:
        peer = _Peer(ws)
        self._peers.add(peer)
        writer = asyncio.create_task(peer.write_loop())
        try:
            if self.require_auth:
                peer.send(["AUTH", peer.challenge])
            while True:
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
            peer.subs.clear()
            writer.cancel()

    async def _on_message(self, peer: _Peer, data: bytes) -> None:
        if len(data) > self.max_frame_bytes:
            reason = (
                f"invalid: message of {len(data)} bytes exceeds this relay's limit of "
                f"{self.max_frame_bytes} bytes"
            )
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
            await self._on_event(peer, msg)
        elif kind == "REQ":
            await self._on_req(peer, msg)
        elif kind == "CLOSE":
            if len(msg) != 2 or not isinstance(msg[1], str):
                peer.send(["NOTICE", "invalid: CLOSE needs exactly one subscription id"])
                return
            peer.subs.pop(msg[1], None)
        elif kind == "AUTH":
            self._on_auth(peer, msg)
        else:
            peer.send(["NOTICE", f"invalid: unsupported message type {kind[:32]!r}"])

    async def _on_event(self, peer: _Peer, msg: list[Any]) -> None:
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
        try:
            ev.check()
        except NostrError as exc:
            peer.send(["OK", ev.id, False, str(exc)])  # check() already says "invalid: ..."
            return
        if self.require_auth and not peer.authed:
            peer.send(["OK", ev.id, False, "auth-required: this relay accepts events from authenticated clients"])
            return
        if ev.kind == CLIENT_AUTH:
            peer.send(["OK", ev.id, False, "invalid: kind 22242 is only accepted in an AUTH message"])
            return
        if self.max_future_seconds is not None and ev.created_at > time.time() + self.max_future_seconds:
            minutes = self.max_future_seconds / 60
            peer.send(["OK", ev.id, False, f"invalid: created_at is more than {minutes:g} minutes in the future"])
            return
        if is_ephemeral(ev.kind):
            peer.send(["OK", ev.id, True, ""])
            self._broadcast(ev)
            return
        try:
            outcome = await self._run_db(self._require_store().save, ev)
        except (sqlite3.Error, RelayError) as exc:
            log.warning("embedded relay could not store %s: %s", ev.id, exc)
            peer.send(["OK", ev.id, False, f"error: could not store the event ({exc})"])
            return
        if outcome.result is SaveResult.STORED:
            peer.send(["OK", ev.id, True, ""])
            self._broadcast(ev)
        elif outcome.result is SaveResult.DUPLICATE:
            peer.send(["OK", ev.id, True, "duplicate: already have this event"])
        else:
            peer.send(["OK", ev.id, False, "replaced: have a newer version of this event"])

    def _broadcast(self, ev: Event) -> None:
        raw = ev.to_json()
        for peer in list(self._peers):
            for sub_id, filters in list(peer.subs.items()):
                if matches_any(filters, ev):
                    peer.send_event(sub_id, raw)

    async def _on_req(self, peer: _Peer, msg: list[Any]) -> None:
        if len(msg) < 3 or not isinstance(msg[1], str):
            peer.send(["NOTICE", "invalid: REQ needs a subscription id and at least one filter"])
            return
        sub_id: str = msg[1]
        if not 1 <= len(sub_id) <= MAX_SUB_ID_LENGTH:
            peer.send(["CLOSED", sub_id, f"invalid: subscription id must be 1 to {MAX_SUB_ID_LENGTH} characters"])
            return
        if self.require_auth and not peer.authed:
            peer.send(["CLOSED", sub_id, "auth-required: this relay serves authenticated clients only"])
            return
        if len(msg) - 2 > self.max_filters:
            peer.send(["CLOSED", sub_id, f"invalid: too many filters (limit {self.max_filters})"])
            return
        try:
            filters = [self._check_filter(f) for f in msg[2:]]
        except NostrError as exc:
            peer.send(["CLOSED", sub_id, f"invalid: {exc}"])
            return
        if sub_id not in peer.subs and len(peer.subs) >= self.max_subscriptions:
            peer.send([
                "CLOSED",
                sub_id,
                f"error: too many open subscriptions (limit {self.max_subscriptions}); close one first",
            ])
            return
        # Registered before the stored query runs, so nothing published meanwhile is missed
        # (it may then arrive twice; clients dedupe by id).
        peer.subs[sub_id] = filters
        try:
            events = await self._run_db(self._require_store().query, filters)
        except (sqlite3.Error, RelayError) as exc:
            log.warning("embedded relay query failed: %s", exc)
            peer.subs.pop(sub_id, None)
            peer.send(["CLOSED", sub_id, "error: the query failed"])
            return
        if peer.subs.get(sub_id) is not filters:
            return  # closed or replaced while the query ran
        for ev in events:
            peer.send_event(sub_id, ev.to_json())
        peer.send(["EOSE", sub_id])

    @staticmethod
    def _check_filter(f: Any) -> Filter:
        checked = validate_filter(f)
        if "search" in checked:
            raise NostrError("this relay does not support NIP-50 search")
        for key, value in checked.items():
            if isinstance(value, list) and len(value) > MAX_FILTER_VALUES:
                raise NostrError(f"filter {key!r} has more than {MAX_FILTER_VALUES} values")
        return checked

    def _on_auth(self, peer: _Peer, msg: list[Any]) -> None:
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

    def _auth_problem(self, peer: _Peer, ev: Event) -> str | None:
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


def _set_headers(headers: Headers, values: dict[str, str]) -> None:
    for key, value in values.items():
        if key in headers:
            del headers[key]  # Headers is a multi-dict: assignment would add a second value
        headers[key] = value


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


async def serve_forever(host: str, port: int, db_path: Path) -> None:
    """Run the embedded relay until SIGINT/SIGTERM or cancellation; print its URL on start."""
    relay = EmbeddedRelay(db_path, host, port)
    await relay.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
                pass
        # Printed once the signal handlers are in place: whoever reads the URL may stop us at once.
        print(relay.url, flush=True)
        print(f"database: {relay.db_path} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await relay.stop()
