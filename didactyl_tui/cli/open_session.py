"""``didactyl --continue`` / ``didactyl --session ID``: which stored conversation the app opens on.

Checked before the app starts, so a bad ID is one line on stderr (exit 2), not an app that opens on an error.
An ID may be a unique prefix, as for ``didactyl sessions show``. The chat's last messages are read here too (a few
milliseconds, whatever its length): the app shows them in its first frame, before its service has started.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..errors import AgentError
from .parser import UsageError


def session_to_open(data_dir: Path, *, last: bool, session_id: str | None) -> str | None:
    """The ID the app should open on, or None (a new chat). Raises :class:`UsageError`."""
    if not last and session_id is None:
        return None
    return asyncio.run(_choose(data_dir, session_id))


async def _choose(data_dir: Path, session_id: str | None) -> str:
    from ..service.sessions import open_sessions

    sessions = open_sessions(data_dir)
    try:
        if session_id is not None:
            if not session_id.strip():
                raise UsageError("--session needs a conversation ID")
            try:
                return await sessions.tail(await sessions.resolve(session_id))
            except AgentError as exc:
                raise UsageError(exc.message) from None
        newest = await sessions.list()  # newest activity first, chats with messages only
        if not newest:
            raise UsageError("no saved conversation to continue")
        return await sessions.tail(newest[0].id)
    finally:
        sessions.store.close()
