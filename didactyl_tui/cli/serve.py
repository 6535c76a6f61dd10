"""``didactyl serve``: the agent headless, for an always-on machine. No UI: it answers NIP-17 direct
messages from the admin and ``[dm] allow`` through the same turn and memory as the terminal (others get
``[dm] guest_tools``), keeps its identity and memory in sync, and logs to stderr: every message answered and
delivered, every reply given up with its reason, what was not answered counted by cause. SIGTERM (or Ctrl-C)
stops it after the turns under way.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from ..actions import no_model_line
from ..config import Config

log = logging.getLogger("didactyl.serve")


def configure_logging(debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    for noisy in ("websockets", "asyncio", "LiteLLM", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def serve(config: Config, data: Path, env: Mapping[str, str], *, debug: bool = False) -> int:
    from ..service.app import AppService
    from ..service.invitations import attach_note, serving_notes

    configure_logging(debug)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    service = AppService(config, data_dir=data, env=dict(env), answer_dms=True)
    await service.start()
    status = None
    try:
        admin = service.admin_pubkey[:12] + "…" if service.admin_pubkey else "none"
        watched = service.policy.path
        log.info("serving as %s on %s (admin %s, %d allowed; %s)", service.identity.agent_npub,
                 ", ".join(service.relays.urls), admin, len(service.policy.dm.allow),
                 f"[admin] and [dm] followed in {watched}" if watched else "no config file followed")
        if not service.model.configured:
            log.warning("no model configured: direct messages are not answered until there is one (%s)",
                        no_model_line(config.keys))
        for note in serving_notes(service):
            log.info("%s", note)

        def moved(url: str) -> None:  # the attach line printed at start names the old address: a new one
            log.info("the embedded relay runs on %s now (it was stopped and came back elsewhere); %s", url,
                     attach_note(service))

        service.on_embedded_relay_move(moved)
        await stop.wait()
        log.info("stopping after the current turn")
        dm = service.dm
        status = await dm.status() if dm is not None else None
    finally:
        await service.stop()
    log.info("stopped (direct messages: %s)", status.summary() if status is not None else "none")
    return 0

