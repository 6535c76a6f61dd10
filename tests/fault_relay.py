"""Relays that misbehave on purpose, with real sockets on loopback.

* :class:`FaultProxy` — a websocket proxy on a free 127.0.0.1 port in front of a real relay (usually
  an :class:`EmbeddedRelay`), scriptable per test: kill a connection after forwarding an EVENT and
  before its OK comes back, hang (accept and never answer), answer ``OK false`` itself, send garbage,
  truncated or oversized frames, answer REQ with CLOSED or send CLOSED on open subscriptions, serve
  forged events, stop, restart on the same port. It logs, in order, every EVENT it forwarded
  upstream and every OK it passed back, so tests can check what a relay was sent and when.
* :class:`SilentServer` — accepts TCP connections and never says a word (not even the websocket
  handshake).
* :class:`HostileRelay` — a websockets server that answers every REQ with scripted (possibly
  forged) events, then EOSE or CLOSED; EVENT gets a scripted OK.
* :func:`forged` — an event dict with some fields changed but the original id and signature.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.messages import (
    ClientClose,
    ClientEvent,
    ClientMessage,
    ClientReq,
    MessageError,
    RelayClosed,
    RelayEose,
    RelayEvent,
    RelayMessage,
    RelayOk,
    parse_client_message,
    parse_relay_message,
)

_quiet = logging.getLogger("tests.fault_relay")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def _from_client(raw: str | bytes) -> ClientMessage | None:
    try:
        return parse_client_message(raw)
    except MessageError:
        return None


def _from_relay(raw: str | bytes) -> RelayMessage | None:
    try:
        return parse_relay_message(raw)
    except MessageError:
        return None


def _abort(ws: ServerConnection | ClientConnection | None) -> None:
    """Drop the TCP connection at once: no close frame, like a crashed relay or a cut cable."""
    if ws is not None:
        with contextlib.suppress(Exception):
            ws.transport.abort()


@dataclass(eq=False)
class _Link:
    """One client connection through the proxy (and its upstream connection)."""

    no: int
    client: ServerConnection
    upstream: ClientConnection | None = None
    hung: bool = False
    subs: set[str] = field(default_factory=set)
    kill_on_ok: set[str] = field(default_factory=set)  # event ids: kill when their OK comes back


@dataclass(frozen=True)
class LogEntry:
    what: str  # "event" (forwarded upstream), "ok" (passed back), "rejected" (our OK false), "killed", ...
    link: int
    event_id: str = ""
    created_at: int = 0
    accepted: bool = False
    message: str = ""


class FaultProxy:
    """A scriptable websocket proxy on 127.0.0.1 in front of ``upstream_url``."""

    def __init__(self, upstream_url: str, *, port: int = 0) -> None:
        from relay_servers import free_port

        self.upstream_url = upstream_url
        self.port = port or free_port()  # restarted on it, its clients reconnecting meanwhile: see free_ports
        self.log: list[LogEntry] = []
        self._server: Server | None = None
        self._links: set[_Link] = set()
        self._seq = 0
        self._hanging = False
        self._rejects: list[str] = []
        self._kill_after_forward = 0
        self._closed_on_req: str | None = None
        self.connections = 0  # client connections accepted so far

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        if self._server is not None:
            return
        last: OSError | None = None
        for _ in range(50):  # on restart the old socket may linger a moment
            try:
                self._server = await serve(
                    self._handle,
                    "127.0.0.1",
                    self.port,
                    max_size=None,
                    ping_interval=None,
                    compression=None,
                    logger=_quiet,
                )
                break
            except OSError as exc:
                last = exc
                await asyncio.sleep(0.02)
        else:
            raise RuntimeError(f"fault proxy cannot listen on port {self.port}: {last}")
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and cut every connection (a crash, not a polite shutdown)."""
        server, self._server = self._server, None
        self.kill()
        if server is not None:
            server.close(close_connections=False)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)

    async def restart(self, downtime: float = 0.0) -> None:
        """Stop, stay down ``downtime`` seconds, listen again on the same port."""
        await self.stop()
        if downtime:
            await asyncio.sleep(downtime)
        await self.start()

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- faults -------------------------------------------------------------------------
    def kill(self) -> None:
        """Cut every open connection now."""
        for link in list(self._links):
            self._kill(link, "killed by the test")

    def kill_after_forward(self, count: int = 1) -> None:
        """The next ``count`` EVENTs reach the relay, then the connection dies before their OK."""
        self._kill_after_forward += count

    def reject_next(self, count: int = 1, reason: str = "error: scripted failure") -> None:
        """Answer the next ``count`` EVENTs with ``OK false reason`` (not forwarded)."""
        self._rejects.extend([reason] * count)

    def hang(self) -> None:
        """From now on swallow every frame both ways, on open and new connections."""
        self._hanging = True
        for link in self._links:
            link.hung = True

    def unhang(self) -> None:
        """Stop hanging; the connections that hung are cut so clients reconnect."""
        self._hanging = False
        for link in list(self._links):
            if link.hung:
                self._kill(link, "hang ended")

    def closed_on_req(self, reason: str | None) -> None:
        """Answer every REQ with ``CLOSED reason`` (None: forward REQs again)."""
        self._closed_on_req = reason

    async def inject(self, frame: str | bytes) -> int:
        """Send a raw frame to every connected client; returns how many got it."""
        sent = 0
        for link in list(self._links):
            with contextlib.suppress(ConnectionClosed):
                await link.client.send(frame)
                sent += 1
        return sent

    async def send_closed(self, reason: str) -> int:
        """Send CLOSED on every open subscription; returns how many."""
        sent = 0
        for link in list(self._links):
            for sub in list(link.subs):
                link.subs.discard(sub)
                with contextlib.suppress(ConnectionClosed):
                    await link.client.send(RelayClosed(sub, reason).to_json())
                    sent += 1
        return sent

    async def serve_events(self, events: list[dict[str, Any]]) -> int:
        """Push ``events`` (dicts, possibly forged) on every open subscription."""
        sent = 0
        for link in list(self._links):
            for sub in list(link.subs):
                for ev in events:
                    with contextlib.suppress(ConnectionClosed):
                        await link.client.send(RelayEvent(sub, ev).to_json())
                        sent += 1
        return sent

    # --- what happened ------------------------------------------------------------------
    def forwarded_events(self) -> list[LogEntry]:
        return [e for e in self.log if e.what == "event"]

    def oks_passed(self) -> list[LogEntry]:
        return [e for e in self.log if e.what == "ok"]

    # --- plumbing -----------------------------------------------------------------------
    def _kill(self, link: _Link, why: str) -> None:
        self.log.append(LogEntry("killed", link.no, message=why))
        self._links.discard(link)
        _abort(link.client)
        _abort(link.upstream)

    async def _handle(self, client: ServerConnection) -> None:
        self._seq += 1
        self.connections += 1
        link = _Link(self._seq, client, hung=self._hanging)
        self._links.add(link)
        try:
            if not link.hung:
                try:
                    link.upstream = await connect(
                        self.upstream_url, open_timeout=2.0, ping_interval=None, max_size=None, compression=None
                    )
                except Exception as exc:  # the relay behind us is down: so are we
                    self._kill(link, f"upstream unreachable: {exc}")
                    return
            await self._pump(link)
        except Exception as exc:  # the proxy must never be the thing that crashes
            self.log.append(LogEntry("proxy_error", link.no, message=repr(exc)))
        finally:
            self._links.discard(link)
            _abort(link.upstream)
            _abort(client)

    async def _pump(self, link: _Link) -> None:
        tasks = [asyncio.create_task(self._client_to_upstream(link))]
        if link.upstream is not None:
            tasks.append(asyncio.create_task(self._upstream_to_client(link)))
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task

    async def _client_to_upstream(self, link: _Link) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in link.client:
                if link.hung:
                    self.log.append(LogEntry("swallowed", link.no, message=str(raw)[:80]))
                    continue
                msg = _from_client(raw)
                if isinstance(msg, ClientEvent):
                    eid = str(msg.event.get("id", ""))
                    created_at = msg.event.get("created_at", 0)
                    if self._rejects:
                        reason = self._rejects.pop(0)
                        self.log.append(LogEntry("rejected", link.no, eid, created_at, False, reason))
                        await link.client.send(RelayOk(eid, False, reason).to_json())
                        continue
                    if self._kill_after_forward:
                        self._kill_after_forward -= 1
                        link.kill_on_ok.add(eid)
                    self.log.append(LogEntry("event", link.no, eid, created_at))
                elif isinstance(msg, ClientReq):
                    if self._closed_on_req is not None:
                        await link.client.send(RelayClosed(msg.sub_id, self._closed_on_req).to_json())
                        continue
                    link.subs.add(msg.sub_id)
                elif isinstance(msg, ClientClose):
                    link.subs.discard(msg.sub_id)
                assert link.upstream is not None
                await link.upstream.send(raw)

    async def _upstream_to_client(self, link: _Link) -> None:
        assert link.upstream is not None
        with contextlib.suppress(ConnectionClosed):
            async for raw in link.upstream:
                if link.hung:
                    continue
                msg = _from_relay(raw)
                if isinstance(msg, RelayOk):
                    if msg.event_id in link.kill_on_ok:
                        self._kill(link, f"killed before the OK for {msg.event_id[:12]}")
                        return
                    self.log.append(LogEntry("ok", link.no, msg.event_id, 0, msg.accepted, msg.reason))
                elif isinstance(msg, RelayClosed):
                    link.subs.discard(msg.sub_id)
                await link.client.send(raw)


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (not even the websocket handshake)."""

    def __init__(self) -> None:
        self.port = 0
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass  # read and ignore everything

    async def stop(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def __aenter__(self) -> SilentServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class HostileRelay:
    """A relay that serves whatever it is told to, forged or not.

    Every REQ is answered with ``serve(filters)`` (default: every event in :attr:`events`, raw —
    no filtering, no checks), then EOSE, or ``CLOSED closed_reason`` when that is set. Raw strings in
    the list are sent as frames verbatim. EVENT is answered ``OK ok_answer``.
    """

    def __init__(
        self,
        events: list[dict[str, Any] | str] | None = None,
        *,
        serve: Callable[[list[dict[str, Any]]], list[dict[str, Any] | str]] | None = None,
        closed_reason: str | None = None,
        ok_answer: tuple[bool, str] = (True, ""),
    ) -> None:
        self.events: list[dict[str, Any] | str] = list(events or [])
        self._serve = serve
        self.closed_reason = closed_reason
        self.ok_answer = ok_answer
        self.received: list[list[Any]] = []
        self.port = 0
        self._server: Server | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await serve(
            self._handle, "127.0.0.1", 0, max_size=None, ping_interval=None, compression=None, logger=_quiet
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def __aenter__(self) -> HostileRelay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in ws:
                msg = _from_client(raw)
                if msg is None:
                    continue
                self.received.append(msg.to_list())
                if isinstance(msg, ClientReq):
                    filters = [dict(f) for f in msg.filters]
                    for item in self._serve(filters) if self._serve else self.events:
                        await ws.send(item if isinstance(item, str) else RelayEvent(msg.sub_id, item).to_json())
                    if self.closed_reason is not None:
                        await ws.send(RelayClosed(msg.sub_id, self.closed_reason).to_json())
                    else:
                        await ws.send(RelayEose(msg.sub_id).to_json())
                elif isinstance(msg, ClientEvent):
                    accepted, reason = self.ok_answer
                    await ws.send(RelayOk(str(msg.event.get("id", "")), accepted, reason).to_json())


def forged(ev: Event, **changes: Any) -> dict[str, Any]:
    """``ev`` as a dict with ``changes`` applied, keeping its (now wrong) id and signature."""
    data = ev.to_dict()
    data.update(changes)
    return data


def with_bad_signature(ev: Event) -> dict[str, Any]:
    """Right id, signature of something else (flip one nibble)."""
    data = ev.to_dict()
    sig = data["sig"]
    data["sig"] = ("0" if sig[0] != "0" else "1") + sig[1:]
    return data


# --- a whole rig: embedded relays behind fault proxies, a pool, an outbox and a publisher ---------


class FaultRig:
    """``n`` embedded relays (SQLite under ``root``), each behind a :class:`FaultProxy`, a
    :class:`RelayPool` over the proxies, an :class:`Outbox` and a running :class:`DocumentPublisher`.

    Everything is real: sockets on loopback, SQLite files. ``restart_publisher()`` simulates an app
    restart (new pool, outbox and publisher on the same files).
    """

    def __init__(
        self,
        root: Any,
        n: int = 2,
        *,
        timeout: float = 1.0,
        base_delay: float = 0.01,
        max_delay: float = 0.2,
        client_kwargs: dict[str, Any] | None = None,
    ) -> None:
        from pathlib import Path

        self.root = Path(root)
        self.n = n
        self.timeout = timeout
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.client_kwargs = {
            "backoff_base": 0.01,
            "backoff_max": 0.1,
            "connect_timeout": 1.0,
            "ping_interval": None,
            **(client_kwargs or {}),
        }
        self.relays: list[Any] = []
        self.proxies: list[FaultProxy] = []
        self.pool: Any = None
        self.outbox: Any = None
        self.publisher: Any = None
        self.runner: asyncio.Task[None] | None = None
        self.changes = 0

    @property
    def outbox_path(self) -> Any:
        return self.root / "outbox.sqlite3"

    @property
    def urls(self) -> list[str]:
        return [p.url for p in self.proxies]

    async def start(self) -> FaultRig:
        from relay_servers import free_port

        from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay

        for i in range(self.n):
            relay = EmbeddedRelay(self.root / f"relay{i}.sqlite3", port=free_port())  # restarted on it
            await relay.start()
            self.relays.append(relay)
            proxy = FaultProxy(relay.url)
            await proxy.start()
            self.proxies.append(proxy)
        await self.start_publisher()
        return self

    async def start_publisher(self, *, wait_connected: bool = True) -> None:
        from didactyl_tui.agent.documents.outbox import Outbox
        from didactyl_tui.agent.documents.publisher import DocumentPublisher
        from didactyl_tui.nostr.pool import RelayPool

        self.pool = RelayPool(self.urls, **self.client_kwargs)
        await self.pool.start()
        if wait_connected:
            await self.pool.wait_connected(5.0, all_relays=False)
        self.outbox = Outbox(self.outbox_path, base_delay=self.base_delay, max_delay=self.max_delay)
        self.publisher = DocumentPublisher(
            self.pool,
            self.outbox,
            timeout=self.timeout,
            base_delay=self.base_delay,
            max_delay=self.max_delay,
        )
        self.publisher.add_change_listener(self._count_change)
        self.runner = asyncio.create_task(self.publisher.run(max_sleep=0.5))

    def _count_change(self) -> None:
        self.changes += 1

    async def stop_publisher(self) -> None:
        if self.runner is not None:
            self.runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.runner
            self.runner = None
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
        if self.outbox is not None:
            self.outbox.close()
            self.outbox = None

    async def restart_publisher(self) -> None:
        await self.stop_publisher()
        await self.start_publisher(wait_connected=False)

    def runner_error(self) -> BaseException | None:
        """The retry loop must never die; returns what killed it, if anything did."""
        if self.runner is not None and self.runner.done() and not self.runner.cancelled():
            return self.runner.exception() or RuntimeError("the retry loop returned")
        return None

    async def restart_relay(self, i: int, downtime: float = 0.0) -> None:
        """Stop the embedded relay ``i`` and start it again on the same port and database."""
        relay = self.relays[i]
        await relay.stop()
        if downtime:
            await asyncio.sleep(downtime)
        for _ in range(50):
            try:
                await relay.start()
                return
            except Exception:  # the port may linger a moment
                await asyncio.sleep(0.02)
        await relay.start()

    async def held(self, i: int, flt: dict[str, Any]) -> list[Event]:
        return await self.relays[i].query([flt])

    async def close(self) -> None:
        await self.stop_publisher()
        for proxy in self.proxies:
            await proxy.stop()
        for relay in self.relays:
            await relay.stop()

    async def __aenter__(self) -> FaultRig:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
