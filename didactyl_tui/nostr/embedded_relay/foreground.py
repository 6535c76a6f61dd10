"""The embedded relay alone in the foreground, for benchmarks and attack tests (``python -m
didactyl_tui.nostr.embedded_relay``): no data dir, no lock file, no proof of identity (that is the shared relay
process's, :mod:`.process`).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from .server import EmbeddedRelay, freeze_startup_objects


async def serve_forever(host: str, port: int, db_path: Path, **relay_options: Any) -> None:
    """Run the embedded relay until SIGINT/SIGTERM or cancellation; print its URL on start.

    ``relay_options`` go to :class:`EmbeddedRelay` (``limits``, ``allowed_writers``, ...).
    """
    relay = EmbeddedRelay(db_path, host, port, **relay_options)
    await relay.start()
    freeze_startup_objects()
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
