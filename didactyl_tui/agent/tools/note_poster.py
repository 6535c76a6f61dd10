"""What ``post_note`` posts through: the agent's signer, the publish path and the confirmation. The service
passes a confirm that asks the person at the terminal (a dialog), or ``None`` when config allows posting
outright; a session with nobody to ask (a DM, ``serve``) passes one that declines."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ...nostr.event import Event
from ...nostr.kinds import TEXT_NOTE
from ...nostr.signer import Signer
from .registry import ToolError

MAX_NOTE_CHARS = 2000


@dataclass
class NotePoster:
    signer: Signer
    publish: Callable[[Event], Awaitable[Any]]  # returns a PublishOutcome (anything with accepted_by)
    confirm: Callable[[str], Awaitable[bool]] | None  # None: config allows posting without asking
    clock: Callable[[], float] = time.time
    max_chars: int = MAX_NOTE_CHARS
    posted: list[str] = field(default_factory=list)  # ids of notes posted this session

    async def post(self, text: str) -> dict[str, Any]:
        text = text.strip() if isinstance(text, str) else ""
        if not text:
            raise ToolError("a note needs some text")
        if len(text) > self.max_chars:
            raise ToolError(f"a note is at most {self.max_chars:,} characters, this one is {len(text):,}")
        if self.confirm is not None and not await self.confirm(text):
            return {"posted": False, "reason": "the user declined to publish this note"}
        ev = await self.signer.sign_event(kind=TEXT_NOTE, content=text, created_at=int(self.clock()), tags=())
        outcome = await self.publish(ev)
        accepted = list(getattr(outcome, "accepted_by", []))
        self.posted.append(ev.id)
        out: dict[str, Any] = {"posted": True, "event_id": ev.id, "accepted_by": accepted}
        if not accepted:
            out["warning"] = "no relay accepted the note yet"
        return out
