"""What kind of session a turn belongs to: it decides whether the memory backend learns from the turn.

The Skald design: ``record_turn`` runs only for interactive, non-ephemeral turns — a person at the
terminal, or a person writing to the agent by direct message. A headless ``chat`` (scripts, tests) and a
dry run never teach the backend.
"""

from __future__ import annotations

from enum import Enum


class SessionKind(str, Enum):
    TERMINAL = "terminal"
    DM = "dm"
    HEADLESS_CHAT = "chat"
    DRY_RUN = "dry_run"

    @property
    def records_turns(self) -> bool:
        """Whether the memory backend's ``record_turn`` sees this session's turns."""
        return self in (SessionKind.TERMINAL, SessionKind.DM)
