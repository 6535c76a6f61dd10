"""The session kind of the turn running now, in a context variable (each turn runs in its own task): the permission
gate (service/permissions.py) reads it to know who could allow a tool that acts — only a terminal turn can ask the
person at the terminal; a DM, ``serve`` or headless ``chat`` turn has nobody to ask."""

from __future__ import annotations

from contextvars import ContextVar

from ..agent.conversations.session_kind import SessionKind

current_session_kind: ContextVar[SessionKind | None] = ContextVar("didactyl_session_kind", default=None)
