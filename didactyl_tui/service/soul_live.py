"""The soul, live: a kind 31120 published elsewhere (``didactyl soul publish`` beside the app, another device,
any Nostr client holding the agent's key) while the app or ``serve`` runs is judged as at start and, when it
is newer and reads and lints clean, used by the next prompt assembly; the views hear :class:`SoulChanged`.

One subscription follows the soul and the task list (service/self_documents.py: it judges every newer version
as memory's are judged — a concurrent edit of ours is told, both texts kept — and keeps it in the history);
each soul it hears is also handed to :func:`soul_listener`'s callback, which decides the soul in use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ..nostr.event import Event
from .events import ServiceEvent, SoulChanged
from .soul import SoulService

log = logging.getLogger("didactyl.service")


def soul_listener(soul: SoulService, emit: Callable[[ServiceEvent], None],
                  spawn: Callable[[Coroutine[Any, Any, None]], object]) -> Callable[[str, Event], None]:
    """What to do with a soul heard on a relay: use it if it is newer than the one in use and reads and lints
    clean (the start's rules), and tell the views (:class:`SoulChanged`). ``spawn`` runs the judgement as a
    task of the service (the reading is on a worker thread)."""

    async def judge(url: str, ev: Event) -> None:
        view = await soul.take_newer(ev)
        if view is None or view.event_id is None or view.created_at is None:
            return
        log.info("a newer soul is in use: event %s from %s", view.event_id[:12], url)
        emit(SoulChanged(view.event_id, view.created_at, tuple(view.template.names), url))

    return lambda url, ev: spawn(judge(url, ev))
