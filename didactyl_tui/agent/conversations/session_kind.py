"""What kind of session a turn belongs to: it decides whether the memory backend learns from the turn.

The Skald design: the backend learns only from interactive, non-ephemeral turns — a person at the terminal, or
someone writing to the agent by direct message. A guest's turns (any conversation but the admin's own) are learnt for
that conversation alone (``record_conversation_turn``): another sender's words never reach the admin's context.
A headless ``chat`` (scripts, tests), an ephemeral one (``chat --ephemeral``) and a dry run never teach the backend.
An ephemeral turn also leaves no conversation behind: nothing is saved as a session (it may read a saved chat's
history, never adds to it).
"""

from __future__ import annotations

from enum import Enum


class SessionKind(str, Enum):
    TERMINAL = "terminal"
    DM = "dm"  # the admin's own conversation
    DM_GUEST = "dm_guest"  # any other direct-message conversation: learnt for itself alone
    HEADLESS_CHAT = "chat"
    EPHEMERAL_CHAT = "ephemeral"
    DRY_RUN = "dry_run"

    @property
    def records_turns(self) -> bool:
        """Whether the memory backend learns from this session's turns (a guest's: for that conversation alone)."""
        return self in (SessionKind.TERMINAL, SessionKind.DM, SessionKind.DM_GUEST)

    @property
    def keeps_conversation(self) -> bool:
        """Whether the turn (message, reply, tool calls, prompt assembly) is saved in its session."""
        return self not in (SessionKind.EPHEMERAL_CHAT, SessionKind.DRY_RUN)
