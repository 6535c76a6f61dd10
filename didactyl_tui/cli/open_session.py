"""``didactyl --continue`` / ``didactyl --session ID``: which stored conversation the app opens on, and where.

Checked before the app starts, so a bad ID is one line on stderr (exit 2), not an app that opens on an error.
An ID may be a unique prefix, as for ``didactyl sessions show``.

A conversation is with one agent (#31): one held with an agent that runs elsewhere (``didactyl attach``) opens
attached to that agent, as ``didactyl attach`` would, never with this data dir's agent answering in it; with
``[attach] agent`` set, only the conversation with that agent opens (another is one line saying how to open it).
The chat's last messages are read here too (a few milliseconds, whatever its length): the app shows them in its
first frame, before its service has started.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AgentError
from .parser import UsageError

if TYPE_CHECKING:
    from ..service.sessions import StoredTail


def session_to_open(data_dir: Path, *, last: bool, session_id: str | None,
                    attached_to: str | None) -> tuple[StoredTail, str | None] | None:
    """The conversation the app should open on (its last messages) and the agent elsewhere it is with (None: this
    data dir's own), or None (a new chat). ``attached_to``: the agent ``[attach] agent`` names (hex), if any.
    Raises :class:`UsageError`."""
    if not last and session_id is None:
        return None
    return asyncio.run(_choose(data_dir, session_id, attached_to))


async def _choose(data_dir: Path, session_id: str | None, attached_to: str | None) -> tuple[StoredTail, str | None]:
    from ..service.sessions import agent_npub, open_sessions, opening_refusal

    sessions = open_sessions(data_dir)
    try:
        if session_id is not None:
            if not session_id.strip():
                raise UsageError("--session needs a conversation ID")
            try:
                info = await sessions.info(await sessions.resolve(session_id))
            except AgentError as exc:
                raise UsageError(exc.message) from None
            if attached_to is not None and info.agent != attached_to:  # [attach] agent names another
                refusal = opening_refusal(info.id, info.agent, attached_to) or ""
                raise UsageError(f"{refusal} ([attach] agent makes this app a window onto "
                                 f"{str(agent_npub(attached_to))[:20]}…)")
            return await sessions.tail(info.id), info.agent
        newest = [s for s in await sessions.list()  # newest activity first, chats with messages only
                  if attached_to is None or s.agent == attached_to]
        if not newest:
            with_whom = f" with the agent {str(agent_npub(attached_to))[:20]}…" if attached_to else ""
            raise UsageError(f"no saved conversation{with_whom} to continue")
        return await sessions.tail(newest[0].id), newest[0].agent
    finally:
        sessions.store.close()
