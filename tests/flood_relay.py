"""A hostile relay that floods every subscription, run in its own process.

    python tests/flood_relay.py MODE [--seconds S]      (prints its port on the first line)

MODE is ``badsig`` (one event with a broken signature, sent again and again), ``distinct`` (a
different broken-signature event every time: each one would cost a verification), ``badjson``
(frames that are not JSON) or ``repeat`` (one valid event again and again: no frame is invalid).
Every flooded event matches ``{"kinds": [1]}``.

It runs in another process so that its own work does not land on the event loop of the client
under test: the client's loop-lag probe then measures the client alone. Bounded: each connection
floods for at most ``--seconds``, and the process exits after ``--seconds`` plus a grace period.
Start it with :func:`start_flood_relay` (a context manager that kills it at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

if __name__ == "__main__":  # run as a script: make the package importable from a worktree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from didactyl_tui.nostr.event import compute_id, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.messages import ClientReq, MessageError, RelayEose, RelayEvent, parse_client_message

MODES = ("badsig", "distinct", "badjson", "repeat")
FLOOD_PUBKEY = hashlib.sha256(b"flood author").hexdigest()  # any 64-hex string: never verifies
VALID_EVENT = sign_event(SecretKey.from_hex("0e" * 32), kind=1, content="the same again",
                         created_at=1_700_000_000).to_dict()


def bad_signature_event(n: int) -> dict[str, object]:
    """A kind-1 event with a correct id and a signature that does not verify."""
    content, created_at = f"flood {n}", 1_700_000_000 + n
    eid = compute_id(FLOOD_PUBKEY, created_at, 1, [], content)
    sig = hashlib.sha512(eid.encode()).hexdigest()  # 128 hex characters, not a signature of eid
    return {"id": eid, "pubkey": FLOOD_PUBKEY, "created_at": created_at, "kind": 1, "tags": [],
            "content": content, "sig": sig}


def frame(mode: str, sub_id: str, n: int) -> str:
    """The ``n``-th frame of a flood."""
    if mode == "badsig":
        return RelayEvent(sub_id, bad_signature_event(0)).to_json()
    if mode == "distinct":
        return RelayEvent(sub_id, bad_signature_event(n)).to_json()
    if mode == "repeat":
        return RelayEvent(sub_id, VALID_EVENT).to_json()
    return ['["EVENT","' + sub_id + '",{"id":', "not json at all {", "\x00\xff garbage"][n % 3]


async def flood(ws: ServerConnection, mode: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    async for raw in ws:
        try:
            msg = parse_client_message(raw)
        except MessageError:
            continue
        if not isinstance(msg, ClientReq):
            continue
        await ws.send(RelayEose(msg.sub_id).to_json())
        n = 0
        while time.monotonic() < deadline:
            await ws.send(frame(mode, msg.sub_id, n))  # waits while the client does not read
            n += 1
        return


async def main(mode: str, seconds: float) -> None:
    async def handle(ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            await flood(ws, mode, seconds)

    async with serve(handle, "127.0.0.1", 0, ping_interval=None, compression=None, max_size=2**20) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.sleep(seconds + 5.0)


@contextlib.asynccontextmanager
async def start_flood_relay(mode: str, seconds: float = 20.0) -> AsyncIterator[str]:
    """Run the flooding relay in a child process; yields its URL; kills it on exit."""
    assert mode in MODES
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), mode, "--seconds", str(seconds)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30.0)
        if not line.strip().isdigit():
            raise RuntimeError("the flood relay did not start")
        yield f"ws://127.0.0.1:{int(line)}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    asyncio.run(main(args.mode, args.seconds))
