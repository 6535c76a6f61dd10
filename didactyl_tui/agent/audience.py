"""Who may read what goes into a prompt: the context policy beside the tool policy.

Every soul section, and the memory backend's context, has an :class:`Audience`: the admin only, or everyone. A turn
is for a :class:`TurnAudience`, decided once per turn from who is in the conversation: the admin alone (the terminal,
the admin's own direct messages) sees everything; a guest — an allow-listed sender, or a group, even one with the
admin in it (the least-privileged member decides) — sees only what is for everyone. What a turn may not see is never
rendered: its tool is not run, and the prompt record names the section as withheld, with the reason.

Defaults (the tool's own declaration in the registry): the agent's public identity (profile, contacts, relays, notes,
npub) is for everyone; memory, tasks, the admin's sections, file memory, notes and the memory backend's context are
for the admin only; a static section of the soul is for everyone. A soul section may say otherwise (``audience``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Audience(str, Enum):
    ADMIN = "admin"  # the admin alone
    EVERYONE = "everyone"  # anyone the agent talks with


# Read liberally (a soul written by another client, or by hand): these words, any case, mean the same.
_WORDS = {
    "admin": Audience.ADMIN, "admin_only": Audience.ADMIN, "admin-only": Audience.ADMIN, "owner": Audience.ADMIN,
    "private": Audience.ADMIN, "me": Audience.ADMIN,
    "everyone": Audience.EVERYONE, "all": Audience.EVERYONE, "anyone": Audience.EVERYONE,
    "public": Audience.EVERYONE, "guests": Audience.EVERYONE, "guest": Audience.EVERYONE,
}


def read_audience(value: str | None) -> Audience | None:
    """A section's ``audience`` as written: None when not given (the section's source decides); a word this app does
    not know means the admin only, the safe reading (nothing private is shown to a guest by a typo)."""
    if value is None or not value.strip():
        return None
    return _WORDS.get(value.strip().lower(), Audience.ADMIN)


@dataclass(frozen=True, slots=True)
class TurnAudience:
    """Whom one turn's prompt is for. ``admin``: the admin alone is in the conversation; ``who`` says whose
    conversation it is, in the words the prompt record and the inspector use."""

    admin: bool
    who: str

    @property
    def name(self) -> str:
        return "admin" if self.admin else "guest"

    def sees(self, audience: Audience) -> bool:
        return self.admin or audience is Audience.EVERYONE

    def withheld(self) -> str:
        """The reason a section for the admin only is left out of this turn."""
        return f"withheld: for the admin only; this is {self.who}"


ADMIN_TURN = TurnAudience(True, "the admin's own conversation")


def guest_turn(who: str = "a conversation with someone other than the admin") -> TurnAudience:
    return TurnAudience(False, who)
