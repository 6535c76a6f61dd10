"""What a stored conversation is, seen from outside the store: a session's summary and a tool call's record."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    title: str
    created_at: float
    updated_at: float
    message_count: int
    agent: str | None = None  # the agent elsewhere it is with (hex, ``didactyl attach``); None: this data dir's own


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    call_id: str
    name: str
    arguments: str
    result: str | None
    created_at: float
