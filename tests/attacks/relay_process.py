"""Relays in processes of their own, measured from outside, and raw-socket clients that misbehave.

* :class:`RelayProcess` — ours (``python -m didactyl_tui.nostr.embedded_relay``) or rust-nostr's
  (``nostr-sdk``'s LocalRelay) in a subprocess; ``rss_mib()`` reads VmRSS from /proc/<pid>/status.
* :func:`raw_ws` — a websocket opened by hand on a plain socket with a tiny receive buffer, so a test
  can send frames and then simply never read (the slow reader), or open a thousand of them cheaply.

Used by tests/attacks/ and bench/relay_bench.py.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NO_RATE_LIMITS = {"events_per_second": 0, "bytes_per_minute": 0, "author_events_per_second": 0,
                  "author_bytes_per_minute": 0}

RUST_RELAY_CODE = """
import asyncio, sys
from nostr_sdk import LocalRelayBuilder
async def main():
    for _ in range(20):
        import socket
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        builder = LocalRelayBuilder().addr("127.0.0.1").port(port)
        if "--no-rate-limits" in sys.argv:
            from nostr_sdk import RateLimit
            builder = builder.rate_limit(RateLimit(max_reqs=1_000_000, notes_per_minute=1_000_000_000))
        relay = builder.build()
        try:
            await relay.run()
        except Exception:
            continue
        print(f"ws://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()
asyncio.run(main())
"""


class RelayProcess:
    """A relay in a subprocess; ``url`` once started."""

    def __init__(self, kind: str, db_path: Path | None = None, *, limits: dict[str, Any] | None = None,
                 writers: list[str] | None = None, gift_wrap_to: list[str] | None = None,
                 compression: bool = False, rate_limits: bool = True) -> None:
        self.kind = kind
        if kind == "embedded":
            assert db_path is not None
            if not rate_limits:
                limits = {**NO_RATE_LIMITS, **(limits or {})}
            cmd = [sys.executable, "-m", "didactyl_tui.nostr.embedded_relay", "--db", str(db_path),
                   "--limits", json.dumps(limits or {})]
            if writers is not None:
                cmd += ["--writers", ",".join(writers)]
            if gift_wrap_to:
                cmd += ["--gift-wrap-to", ",".join(gift_wrap_to)]
            if compression:
                cmd.append("--compression")
        else:
            cmd = [sys.executable, "-c", RUST_RELAY_CODE] + ([] if rate_limits else ["--no-rate-limits"])
        self.cmd = cmd
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, timeout: float = 20.0) -> RelayProcess:
        env = os.environ.copy()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=env)
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), True)
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline and not line.startswith("ws://"):
            line = self.proc.stdout.readline().strip()
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} relay exited with {self.proc.returncode}")
        if not line.startswith("ws://"):
            self.stop()
            raise RuntimeError(f"{self.kind} relay did not print its URL")
        self.url = line
        return self

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_mib(self) -> float:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> RelayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- raw websocket frames ------------------------------------------------------------------------

def ws_frame(text: str | bytes) -> bytes:
    """One masked client text frame (a client must mask; the mask is all zeros, which is allowed)."""
    data = text.encode() if isinstance(text, str) else text
    n = len(data)
    if n < 126:
        head = struct.pack("!BB", 0x81, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
    return head + b"\0\0\0\0" + data


def raw_ws(url: str, *, origin: str | None = None, rcvbuf: int = 4096,
           timeout: float = 5.0) -> tuple[socket.socket, int]:
    """A websocket handshake on a plain socket; returns (socket, HTTP status). The caller owns it."""
    host, port = url.removeprefix("ws://").rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    lines = ["GET / HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    return sock, status
