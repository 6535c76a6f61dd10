"""A server that takes the embedded relay's place, knowing everything another local user can read about it (#30).

It listens where the relay was (its port, or a socket the test bound first), serves the NIP-11 document the real
relay served, and answers every identity question with the instance id ``relay.lock`` names and the best proof it
can get without ``relay.key``:

* ``"none"`` — no proof at all (a program that merely answers like a relay);
* ``"replay"`` — the real relay's answer to an earlier question (a nonce of its own, asked while the relay lived);
* ``"relay"`` — the real relay's answer to the **client's own nonce**, asked on its own connection to wherever the
  relay listens now (``relay_at()``, e.g. read from ``relay.lock``): the strongest a local user can do.

It accepts websocket connections as a relay would (EOSE to a REQ, OK to an EVENT) and records every frame it
receives (``frames``): a test asserts that it got no REQ and no EVENT.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from didactyl_tui.nostr import relay_proof

PROOF_HEADERS = (relay_proof.INSTANCE_HEADER, relay_proof.STATE_HEADER, relay_proof.PROOF_HEADER)


async def ask_relay(host: str, port: int, nonce: str, timeout: float = 5.0) -> dict[str, str]:
    """The proof headers a server answers to ``nonce`` (asked on a connection of our own), by their names."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n{relay_proof.CHALLENGE_HEADER}: {nonce}\r\n"
                         "Connection: close\r\n\r\n".encode())
            await writer.drain()
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = await reader.read(4096)
                if not chunk:
                    break
                head += chunk
        finally:
            writer.close()
    found: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        for wanted in PROOF_HEADERS:
            if name.strip().lower() == wanted.lower():
                found[wanted] = value.strip()
    return found


class ImpostorRelay:
    def __init__(self, *, instance: str, info: dict[str, Any] | None = None, proof: str = "none",
                 relay_at: Callable[[], tuple[str, int] | None] | None = None, port: int = 0,
                 sock: socket.socket | None = None) -> None:
        if proof not in ("none", "replay", "relay") or (proof != "none" and relay_at is None):
            raise ValueError("replay and relay need relay_at")
        self.instance, self.info, self.proof, self.relay_at = instance, info, proof, relay_at
        self.port, self.sock = port, sock
        self.questions = 0  # requests that carried an identity challenge (websocket upgrades and plain ones)
        self.probes = 0  # of them, plain HTTP requests (a launcher checking relay.lock), not upgrades
        self.upgrades = 0  # websocket connections it accepted
        self.frames: list[Any] = []  # every frame received on them (JSON-decoded when it is JSON)
        self._replay: dict[str, str] | None = None
        self._server: Server | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def received(self, kind: str) -> list[Any]:
        return [f for f in self.frames if isinstance(f, list) and f and f[0] == kind]

    async def start(self) -> None:
        if self.proof == "replay":  # learned while the relay still lived
            where = self.relay_at() if self.relay_at else None
            assert where is not None, "replay: the relay must be reachable when the impostor starts"
            self._replay = await ask_relay(*where, secrets.token_hex(relay_proof.NONCE_BYTES))
        where = {"sock": self.sock} if self.sock is not None else {"host": "127.0.0.1", "port": self.port}
        self._server = await serve(self._handle, process_request=self._request, process_response=self._response,
                                   ping_interval=None, max_size=None, **where)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ImpostorRelay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return None
        if "application/nostr+json" in request.headers.get("Accept", "") and self.info is not None:
            return connection.respond(HTTPStatus.OK, json.dumps(self.info))
        return connection.respond(HTTPStatus.OK, "a relay\n")

    async def _response(self, connection: ServerConnection, request: Request, response: Response) -> None:
        nonce = request.headers.get(relay_proof.CHALLENGE_HEADER)
        if nonce is None:
            return
        self.questions += 1
        if request.headers.get("Upgrade", "").lower() != "websocket":
            self.probes += 1
        headers = {relay_proof.INSTANCE_HEADER: self.instance, relay_proof.STATE_HEADER: relay_proof.SERVING}
        if self.proof == "replay" and self._replay:
            headers.update(self._replay)
        elif self.proof == "relay" and (where := self.relay_at() if self.relay_at else None) is not None \
                and where[1] != self.port:  # relay.lock may still name this port: never ask itself
            try:
                headers.update(await ask_relay(*where, nonce))
            except (OSError, TimeoutError):
                pass
        for name, value in headers.items():
            if name in response.headers:
                del response.headers[name]
            response.headers[name] = value

    async def _handle(self, ws: ServerConnection) -> None:
        self.upgrades += 1
        try:
            async for data in ws:
                try:
                    frame = json.loads(data)
                except ValueError:
                    frame = data
                self.frames.append(frame)
                if isinstance(frame, list) and frame and frame[0] == "REQ" and len(frame) > 1:
                    await ws.send(json.dumps(["EOSE", frame[1]]))
                elif isinstance(frame, list) and frame and frame[0] == "EVENT" and len(frame) > 1:
                    event_id = frame[1].get("id", "") if isinstance(frame[1], dict) else ""
                    await ws.send(json.dumps(["OK", event_id, True, ""]))
        except ConnectionClosed:
            pass


def try_bind(port: int) -> socket.socket | None:
    """A listening socket on 127.0.0.1:``port``, or None while another socket holds it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: a TIME_WAIT does not stop it
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
    except OSError:
        sock.close()
        return None
    sock.setblocking(False)
    return sock


class PortSnatcher:
    """Binds ``port`` the moment its holder lets it go (a thread trying every ~0.2 ms): a local program waiting for
    the relay's port, e.g. during a reload that restarts the relay on the same port."""

    def __init__(self, port: int, on_bound: Callable[[], object] | None = None) -> None:
        """``on_bound`` runs in the thread the moment the port is bound (e.g. to freeze the relay there)."""
        import threading

        self.port, self.on_bound = port, on_bound
        self.sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"snatch-{port}", daemon=True)

    def start(self) -> PortSnatcher:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            sock = try_bind(self.port)
            if sock is not None:
                self.sock = sock
                if self.on_bound is not None:
                    self.on_bound()
                return
            self._stop.wait(0.0002)

    async def finish(self) -> socket.socket | None:
        """Stop trying; the socket if it got the port (None: the port's holder kept or took it back first)."""
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 5)
        return self.sock
