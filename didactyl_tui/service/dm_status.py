"""How the direct-message inbox is shown: what it is doing (for the app's status and ``serve``'s log), what it did
not answer (counted and logged by cause) and how a conversation's participants are named."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..agent.dm.inbox import DropTally, room_members
from ..agent.dm.ledger import DELIVERED, GIVEN_UP
from ..agent.identity.cache import IdentityCache
from ..nostr.nip19 import encode_npub


@dataclass(frozen=True, slots=True)
class DmStatus:
    """How the direct-message inbox is shown: what it is doing (for the app's status and ``serve``'s log) and how a
conversation's participants are named."""

    active: bool  # this process answers (False: another one does, or none yet)
    standby: str  # why not, when not active
    waiting: int  # messages waiting for their conversation's turn
    answering: int  # model turns under way
    undelivered: int  # reply wraps waiting for a relay of their recipient
    messages: dict[str, int]  # by ledger state: written, delivered, given_up, elsewhere, ...
    not_answered: dict[str, int]  # by cause: stranger, bad signature, duplicate, ...
    given_up: list[str]  # the last messages given up: "<who>: <reason>"

    def summary(self) -> str:
        """One line, e.g. ``3 delivered, 1 awaiting delivery; not answered: stranger 2``."""
        if not self.active:
            return f"answered elsewhere ({self.standby})" if self.standby else "not answering"
        parts = [f"{self.messages.get(DELIVERED, 0)} delivered"]
        if self.answering or self.waiting:
            parts.append(f"{self.answering} answering, {self.waiting} waiting")
        if self.undelivered:
            parts.append(f"{self.undelivered} awaiting delivery")
        if self.messages.get(GIVEN_UP):
            parts.append(f"{self.messages[GIVEN_UP]} given up")
        line = ", ".join(parts)
        dropped = [f"{cause} {n}" for cause, n in sorted(self.not_answered.items())
                   if cause not in ("own copy", "duplicate")]
        return line + (f"; not answered: {', '.join(dropped)}" if dropped else "")


log = logging.getLogger("didactyl.dm")


class DropLog:
    """What was not answered, counted by cause and logged: a cause's first, then at most one line per
    ``interval_s`` with its running count (a flood of bad wraps is a few lines, not one per wrap); never the text."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.tally = DropTally(interval_s)

    def add(self, verdict: str, cause: str, reason: str) -> None:
        count = self.tally.add(cause)
        if count is not None:
            label = verdict if cause == verdict else f"{verdict} ({cause})"
            log.info("dm %s: %d so far; last: %s", label, count, reason)

    async def run(self) -> None:
        """The running counts of causes whose interval has passed, every interval (a task)."""
        while True:
            await asyncio.sleep(self.interval_s)
            self._say(self.tally.pending())

    def flush(self) -> None:
        """Every count not yet logged (at stop)."""
        self._say(self.tally.unlogged())

    @staticmethod
    def _say(counts: dict[str, int]) -> None:
        for cause, count in counts.items():
            log.info("dm not answered (%s): %d so far", cause, count)


class ParticipantNames:
    """The admin by their profile name when cached; anyone else by a short npub."""

    def __init__(self, admin: Callable[[], IdentityCache | None]) -> None:
        self._admin = admin  # the admin's cache as it is now (it is replaced when [admin] changes)

    def name_of(self, pubkey: str) -> str:
        """How a participant is named: their profile name when cached (the admin's), else a short npub."""
        admin = self._admin()
        if admin is not None and pubkey == admin.pubkey:
            name = admin.view().profile.get("name")
            # Text from the relays: one line, no control characters (it reaches logs, titles, notifications).
            name = "".join(ch for ch in " ".join(str(name).split()) if ch.isprintable())[:64] if name else ""
            if name.strip():
                return name
        return encode_npub(pubkey)[:16] + "…"

    def room_name(self, room: str) -> str:
        return ", ".join(self.name_of(pk) for pk in room_members(room))
