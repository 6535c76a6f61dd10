"""The soul, live: a kind 31120 published elsewhere (``didactyl soul publish`` beside the app, another device,
any Nostr client holding the agent's key) while the app or ``serve`` runs is judged as at start and, when it
is newer and reads and lints clean, used by the next prompt assembly; the views hear :class:`SoulChanged`.

The same machinery as the memory's live path (:meth:`RelayPool.subscribe`: one REQ per relay, each event
delivered once, re-sent on reconnect), opened after the start-up fetch and closed with the runtime. The
task list (``d = tasks``) is followed by service/self_documents.py, which also judges every newer soul as memory's
versions are judged (a concurrent edit of ours is told, both texts kept) and keeps it in the history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..agent.soul_event import soul_filter
from ..nostr.event import Event
from .events import ServiceEvent, SoulChanged
from .runtime import Runtime
from .soul import SoulService

log = logging.getLogger("didactyl.service")


def follow_soul(rt: Runtime, soul: SoulService, emit: Callable[[ServiceEvent], None]) -> None:
    """Subscribe to the agent's own soul on every relay. No ``since``: each relay first serves the version it
    holds, which is news only if it is newer than the one chosen at start (a version published while the
    start-up read was under way is not missed)."""

    def arrived(url: str, ev: Event) -> None:
        view = soul.take_newer(ev)
        if view is None or view.event_id is None or view.created_at is None:
            return
        log.info("a newer soul is in use: event %s from %s", view.event_id[:12], url)
        emit(SoulChanged(view.event_id, view.created_at, tuple(view.template.names), url))

    sub = rt.pool.subscribe([soul_filter(rt.key.public_key_hex)], arrived)
    rt.closers.push_async_callback(sub.close)
