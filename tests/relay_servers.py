"""Real relays for tests, on free loopback ports: ours (embedded, SQLite) and rust-nostr's.

Fixtures (registered in conftest.py):

* ``embedded_relay`` — a running :class:`EmbeddedRelay` on a temporary database;
* ``rust_relay`` — rust-nostr's relay (PyPI ``nostr-sdk``), in memory;
* ``any_relay`` — parametrized over both, as a :class:`RelayUnderTest` that can restart on the
  same port and names where the two relays legitimately differ.

Also :func:`free_port`, :func:`fast_client_kwargs` (client settings that keep tests quick),
:func:`eventually`, and :class:`ScriptedRelay` — a websockets server that runs a test's script on
each connection, for hostile and broken relays (garbage frames, forged events, no OK, CLOSED...).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.messages import RelayMessage

# Ports a test binds, frees and binds again (a relay or proxy restarted on the same port, an address picked before
# its server starts) come from a block of this worker's own, below the kernel's ephemeral range. A port freed there
# is never handed to another worker's bind(0), nor used as a connection's source port. From the ephemeral range,
# a relay that another worker started on port 0 could get it while it was down, and this test's clients, still
# reconnecting, would then hold that relay (an idle exit that never came, in a random-order run).
_PORT_BLOCK = 1500
_ports_given = os.getpid()  # where in the block to start: two suites at once seldom meet


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; BSDs and macOS start at 49152


def _worker_block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # "gw3": xdist's fourth worker; alone: the first block
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    low = 12000 + _PORT_BLOCK * index
    if low + _PORT_BLOCK > _ephemeral_low():
        raise RuntimeError(f"no reserved test ports for worker {worker}: ephemeral ports start at {_ephemeral_low()}")
    return range(low, low + _PORT_BLOCK)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` different ports free on 127.0.0.1 right now, from this worker's own block (see above): the next
    ones in turn, so a port is not handed out again until the block has come round."""
    global _ports_given
    block = _worker_block()
    ports: list[int] = []
    for _ in range(len(block)):
        port = block[_ports_given % len(block)]
        _ports_given += 1
        if _bindable(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError(f"only {len(ports)} of {count} free ports in {block}")


def free_port() -> int:
    """A port free on 127.0.0.1 right now, from this worker's own block: nothing outside this worker takes it."""
    return free_ports(1)[0]


def fast_client_kwargs(**overrides: Any) -> dict[str, Any]:
    """RelayClient/RelayPool settings for tests: quick reconnects, short waits."""
    kwargs: dict[str, Any] = {
        "backoff_base": 0.02,
        "backoff_max": 0.2,
        "connect_timeout": 2.0,
        "ping_interval": None,
    }
    kwargs.update(overrides)
    return kwargs


class RelayUnderTest:
    """A relay the shared semantics suite runs against."""

    name: str = "?"
    #: keeps its events across a restart (ours: SQLite; rust-nostr's test relay: in memory)
    persistent: bool = False
    #: OK-false reason prefixes this relay uses for a replaceable/addressable version older than the
    #: stored one. NIP-01 only says older versions need not be kept; it names no prefix.
    outdated_reasons: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def restart(self) -> None:
        await self.stop()
        await self.start()


class EmbeddedRelayUnderTest(RelayUnderTest):
    name = "embedded"
    persistent = True
    outdated_reasons = ("replaced:",)

    def __init__(self, db_path: Path, **kwargs: Any) -> None:
        self.db_path = db_path
        self.kwargs = kwargs
        self.port = free_port()  # restarted on it: see free_ports
        self.relay: EmbeddedRelay | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        # Same port and same database on every restart.
        self.relay = EmbeddedRelay(self.db_path, "127.0.0.1", self.port, **self.kwargs)
        await self.relay.start()
        self.port = self.relay.port

    async def stop(self) -> None:
        if self.relay is not None:
            await self.relay.stop()
            self.relay = None


class RustRelayUnderTest(RelayUnderTest):
    name = "rust-nostr"
    persistent = False
    outdated_reasons = ("error:",)  # it answers OK false "error: unknown"

    def __init__(self) -> None:
        self.port = 0
        self._relay: Any = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        from nostr_sdk import LocalRelayBuilder

        keep_port = self.port != 0  # a restart comes back on the same port
        last: Exception | None = None
        for _ in range(5):
            port = self.port if keep_port else free_port()
            relay = LocalRelayBuilder().addr("127.0.0.1").port(port).build()
            try:
                await relay.run()
            except Exception as exc:  # the port is (still) taken: try again
                last = exc
                await asyncio.sleep(0.05)
                continue
            self._relay, self.port = relay, port
            return
        raise RuntimeError(f"could not start rust-nostr's relay: {last}")

    async def stop(self) -> None:
        if self._relay is not None:
            self._relay.shutdown()
            self._relay = None


@contextlib.asynccontextmanager
async def running_relay(tmp_path: Path) -> AsyncIterator[EmbeddedRelayUnderTest]:
    """Our relay on a free port while the block runs (conftest's ``relay`` for one test)."""
    server = EmbeddedRelayUnderTest(tmp_path / "relay.sqlite3")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def embedded_relay(tmp_path: Path) -> AsyncIterator[EmbeddedRelay]:
    relay = EmbeddedRelay(tmp_path / "relay.db")
    await relay.start()
    try:
        yield relay
    finally:
        await relay.stop()


@pytest.fixture
async def rust_relay() -> AsyncIterator[RustRelayUnderTest]:
    relay = RustRelayUnderTest()
    await relay.start()
    try:
        yield relay
    finally:
        await relay.stop()


@pytest.fixture(params=["embedded", "rust-nostr"])
async def any_relay(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RelayUnderTest]:
    relay: RelayUnderTest
    if request.param == "embedded":
        relay = EmbeddedRelayUnderTest(tmp_path / "relay.db")
    else:
        relay = RustRelayUnderTest()
    await relay.start()
    try:
        yield relay
    finally:
        await relay.stop()


async def eventually(predicate: Any, timeout: float = 5.0, interval: float = 0.01) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout`` passes; returns its last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() >= deadline:
            return bool(predicate())
        await asyncio.sleep(interval)
    return True


class ScriptedConnection:
    """One connection to a :class:`ScriptedRelay`, as its script sees it."""

    def __init__(self, ws: ServerConnection, relay: ScriptedRelay, index: int) -> None:
        self.ws = ws
        self.relay = relay
        self.index = index  # 0 for the first connection, 1 after the first reconnect, ...

    async def recv(self) -> list[Any]:
        """The next client message, parsed (and recorded in ``relay.received``)."""
        msg = json.loads(await self.ws.recv())
        self.relay.received.append(msg)
        return msg

    async def recv_type(self, kind: str) -> list[Any]:
        """Skip messages until one of type ``kind`` (e.g. "REQ", "EVENT") arrives."""
        while True:
            msg = await self.recv()
            if msg and msg[0] == kind:
                return msg

    async def send(self, message: list[Any] | RelayMessage) -> None:
        """Send a message: typed (``RelayOk(...)``) or as a list, possibly malformed on purpose."""
        await self.ws.send(json.dumps(message) if isinstance(message, list) else message.to_json())

    async def send_raw(self, data: str | bytes) -> None:
        await self.ws.send(data)

    async def drain(self) -> None:
        """Read (and record) everything until the client goes away; never answer."""
        with contextlib.suppress(ConnectionClosed):
            while True:
                await self.recv()


Script = Callable[[ScriptedConnection], Awaitable[None]]


class ScriptedRelay:
    """A websockets server whose connections each run ``script`` — a hostile or broken relay.

    When the script returns, the connection is closed (code 1000), like a relay that hangs up.
    """

    def __init__(self, script: Script) -> None:
        self.script = script
        self.port = 0
        self.connections = 0
        self.received: list[list[Any]] = []
        self._server: Server | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await serve(self._handle, "127.0.0.1", self.port, max_size=None, ping_interval=None)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ScriptedRelay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, ws: ServerConnection) -> None:
        index = self.connections
        self.connections += 1
        with contextlib.suppress(ConnectionClosed):
            await self.script(ScriptedConnection(ws, self, index))

    def messages(self, kind: str) -> list[list[Any]]:
        return [m for m in self.received if m and m[0] == kind]
