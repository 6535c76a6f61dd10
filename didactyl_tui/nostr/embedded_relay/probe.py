"""What a launcher asks the server on a loopback port, over plain HTTP, bounded in time and size: whether it proves it
is this data dir's relay (:func:`ask_identity`, the protocol of :mod:`..relay_proof`), and its NIP-11 document
(:func:`fetch_info_document`). Never raises for what the server does: a server is data from outside.

Loaded by :mod:`.shared` in every didactyl process: it imports nothing of the relay itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from .. import relay_proof
from ..relay_proof import ProofError, ProofKey, Proven

DEFAULT_PROBE_TIMEOUT_S = 2.0
MAX_INFO_BYTES = 64 * 1024  # a NIP-11 document is ~1 KB; an answer's head, a few hundred bytes


@dataclass(frozen=True, slots=True)
class IdentityAnswer:
    """What the server on a port said when asked, with a fresh nonce, whether it is this data dir's relay."""

    proven: Proven | None  # the instance it proved to be (and whether it is stopping); None: it proved nothing
    spoke: bool  # something answered in HTTP (False: nothing listens, or it said nothing in time)
    problem: str = ""  # why it proved nothing, in a few words

    def describe(self, where: str) -> str:
        return f"the server on {where} did not prove it is this data dir's embedded relay ({self.problem})"


async def ask_identity(host: str, port: int, key: ProofKey, timeout: float = DEFAULT_PROBE_TIMEOUT_S,
                       ) -> IdentityAnswer:
    """Ask the server on ``host:port`` to prove it is this data dir's relay: a plain HTTP request carrying a fresh
    nonce; its answer must carry the HMAC of :mod:`..relay_proof` over that nonce and this connection's endpoints.
    Bounded in time and size; never raises for what the server does."""
    nonce = secrets.token_hex(relay_proof.NONCE_BYTES)
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                client = relay_proof.endpoint(writer.get_extra_info("sockname"))
                server = relay_proof.endpoint(writer.get_extra_info("peername"))
                hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                writer.write(f"GET / HTTP/1.1\r\nHost: {hostport}\r\n{relay_proof.CHALLENGE_HEADER}: {nonce}\r\n"
                             "Connection: close\r\n\r\n".encode())
                await writer.drain()
                head = await _read_head(reader)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError, ValueError):
        return IdentityAnswer(None, False, "nothing answers")
    headers = _headers_in(head)
    if headers is None:
        return IdentityAnswer(None, bool(head), "it does not answer in HTTP")
    try:
        proven = relay_proof.check(key, nonce, client=client, server=server,
                                   instance=headers.get(relay_proof.INSTANCE_HEADER.lower()),
                                   state=headers.get(relay_proof.STATE_HEADER.lower()),
                                   proof=headers.get(relay_proof.PROOF_HEADER.lower()))
    except ProofError as exc:
        return IdentityAnswer(None, True, str(exc))
    return IdentityAnswer(proven, True)


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """An HTTP response's status line and headers (bounded); what came, if the server stopped before their end."""
    data = b""
    while len(data) <= MAX_INFO_BYTES and b"\r\n\r\n" not in data:
        chunk = await reader.read(MAX_INFO_BYTES + 1 - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _headers_in(response: bytes) -> dict[str, str] | None:
    """The response's headers by lowercased name (the first of each), or None when it is not an HTTP response."""
    head, sep, _ = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not sep or not lines[0].startswith(("HTTP/1.1 ", "HTTP/1.0 ")):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers.setdefault(name.strip().lower(), value.strip())
    return headers


async def fetch_info_document(host: str, port: int, timeout: float = DEFAULT_PROBE_TIMEOUT_S) -> dict[str, Any] | None:
    """The NIP-11 document served over HTTP on ``host:port`` (bounded in size and time); None if none."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                writer.write(f"GET / HTTP/1.1\r\nHost: {hostport}\r\nAccept: application/nostr+json\r\n"
                             "Connection: close\r\n\r\n".encode())
                await writer.drain()
                data = await _read_response(reader)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError, ValueError):
        return None
    return _document_in(data)


async def _read_response(reader: asyncio.StreamReader) -> bytes:
    data = b""
    while len(data) <= MAX_INFO_BYTES:
        chunk = await reader.read(MAX_INFO_BYTES + 1 - len(data))
        if not chunk:
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head) if sep else None
        if length and len(body) >= int(length.group(1)):
            break
    return data


def _document_in(response: bytes) -> dict[str, Any] | None:
    head, _, body = response.partition(b"\r\n\r\n")
    if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
        return None
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None
