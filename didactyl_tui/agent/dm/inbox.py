"""The agent's NIP-17 inbox: which direct messages reach the model, each exactly once, in which conversation.

:meth:`DmInbox.receive` opens a gift wrap (through the :class:`~.dm_signer.DmSigner`) and decides:

- ``unreadable``: the wrap failed a NIP-59/NIP-17 check, or its message is dated far ahead (never shown to
  the model; counted by cause);
- ``own_copy``: our own sent copy; when it answers a message this ledger holds no reply for, another instance
  with the same key answered it (the message is marked ``elsewhere``). Our own copy never marks a message
  delivered: only the sender's wrap does;
- ``stranger``: the sender is neither the admin nor on the allow-list (counted, nothing stored);
- ``duplicate``: the message was received before (two relays, two wraps of the same message, a restart);
- ``answer``: hand it to the model; the ledger (:mod:`.dm_ledger`) follows it from there.

A conversation is its set of participants (NIP-17: the author and the ``p`` tags); :func:`room_key` names it
without the agent. The reply's rumor tags every participant, carries the ``subject``, and is wrapped once per
participant plus the agent's own copy.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ...errors import AgentError
from ...nostr.event import Event
from ...nostr.keys import is_hex_pubkey
from ...nostr.nip17 import MAX_MESSAGE_BYTES, MAX_RECIPIENTS, DirectMessage, NotADirectMessage, make_message
from ...nostr.nip59 import DecryptFailed, RumorRejected, SealRejected, SenderMismatch, UnwrapError, WrapRejected
from ..audience import ADMIN_TURN, TurnAudience, guest_turn
from .ledger import DmLedger
from .prompt_report import report_rumor
from .signer import DmSigner

MAX_FUTURE_S = 15 * 60  # a message dated further ahead is dropped (as relays drop such events)
CUT_MARK = "\n[…cut: the reply was longer than a direct message may be]"


class Verdict(str, Enum):
    ANSWER = "answer"
    DUPLICATE = "duplicate"
    STRANGER = "stranger"
    OWN_COPY = "own_copy"
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    message: DirectMessage | None  # None only when unreadable
    reason: str  # one line for the log (never the message text)
    cause: str = ""  # why it is not answered, for the counts: "bad signature", "stranger", ...
    room: str = ""  # the conversation (room_key), for an answer


def room_key(dm: DirectMessage, me: str) -> str:
    """The conversation of ``dm`` without the agent: its other participants, sorted and comma-joined (a
    one-to-one conversation is the counterpart's pubkey)."""
    return ",".join(sorted(dm.room - {me}))


def room_members(room: str) -> list[str]:
    return [pk for pk in room.split(",") if pk]


def cut_to_bytes(text: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``text`` within ``limit`` UTF-8 bytes (marked when cut)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    room = limit - len(CUT_MARK.encode())
    return data[:room].decode("utf-8", "ignore") + CUT_MARK

@dataclass(frozen=True, slots=True)
class DmPolicy:
    """Who may talk to the agent: the admin and an explicit allow-list (hex pubkeys)."""

    admin: str | None = None
    allow: frozenset[str] = frozenset()

    @classmethod
    def of(cls, admin: str | None, allow: Iterable[str] = ()) -> DmPolicy:
        keys = [admin] if admin else []
        for pk in (*keys, *allow):
            if not is_hex_pubkey(pk):
                raise AgentError(f"{pk[:70]!r} is not a hex public key", "Direct messages")
        return cls(admin.lower() if admin else None, frozenset(pk.lower() for pk in allow))

    def accepts(self, pubkey: str) -> bool:
        return pubkey == self.admin or pubkey in self.allow

    def is_admin_room(self, room: str) -> bool:
        """The admin's own conversation with the agent (nobody else in it): the one that has every tool.
        Any other member could steer the model through the shared history, so a group with the admin in it
        is not one."""
        return self.admin is not None and room == self.admin

    def audience(self, room: str, names: str) -> TurnAudience:
        """Whom a turn in ``room`` is for (``names``: its members as the person reads them): the admin alone, or
        guests — the least-privileged member decides, so a group with the admin in it is a guests' conversation."""
        if self.is_admin_room(room):
            return ADMIN_TURN
        members = room_members(room)
        if len(members) == 1:
            return guest_turn(f"a conversation with {names}, who is not the admin")
        with_admin = " (the admin among them)" if self.admin in members else ""
        return guest_turn(f"a group conversation of {names}{with_admin}")


def drop_cause(exc: UnwrapError) -> str:
    """A short name for why a wrap could not be opened (the counts and the log group by it)."""
    text = exc.message
    layer = {WrapRejected: "", SealRejected: "seal "}.get(type(exc))
    if layer is not None and "bad signature" in text:
        return f"bad {layer}signature"
    if layer is not None and "id does not match" in text:
        return f"bad {layer}id"
    causes: dict[type[UnwrapError], str] = {
        WrapRejected: "bad gift wrap", DecryptFailed: "does not decrypt", SealRejected: "bad seal",
        RumorRejected: "bad rumor", SenderMismatch: "forged sender", NotADirectMessage: "not a direct message"}
    return causes.get(type(exc), "unreadable")


class DmInbox:
    """Decides what to do with each incoming gift wrap; builds the replies."""

    def __init__(self, signer: DmSigner, policy: DmPolicy, ledger: DmLedger, *, run_id: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.signer, self.policy, self.ledger, self._clock = signer, policy, ledger, clock
        self.run_id = run_id or uuid.uuid4().hex
        self.counts: Counter[str] = Counter()  # verdicts seen, for the status line and logs

    @property
    def me(self) -> str:
        return self.signer.public_key_hex

    async def receive(self, wrapped: Event, policy: DmPolicy | None = None) -> Decision:
        """Judge one wrap by ``policy`` (who may write as the config says now; None: the one given at start)."""
        decision = await self._decide(wrapped, policy or self.policy)
        self.counts[decision.verdict.value] += 1
        return decision

    async def _decide(self, wrapped: Event, policy: DmPolicy) -> Decision:
        try:
            dm = await self.signer.open(wrapped)
        except UnwrapError as exc:
            return Decision(Verdict.UNREADABLE, None, f"wrap {wrapped.id[:12]}…: {exc.message}", drop_cause(exc))
        if dm.created_at > self._clock() + MAX_FUTURE_S:
            return Decision(Verdict.UNREADABLE, None, f"message {dm.id[:12]}… is dated ahead", "future timestamp")
        if dm.sender == self.me:
            reply_to = dm.reply_to
            if reply_to:
                elsewhere = await asyncio.to_thread(self.ledger.note_own_copy, reply_to)
                if elsewhere:
                    return Decision(Verdict.OWN_COPY, dm, f"message {reply_to[:12]}… was answered by another "
                                    "instance with this key", "answered elsewhere")
            return Decision(Verdict.OWN_COPY, dm, f"our own message {dm.id[:12]}…", "own copy")
        if not policy.accepts(dm.sender):
            return Decision(Verdict.STRANGER, dm, f"message {dm.id[:12]}… from {dm.sender[:12]}…, not allowed",
                            "stranger")
        if len(dm.room - {self.me}) > MAX_RECIPIENTS:  # a reply could not tag them all
            return Decision(Verdict.UNREADABLE, dm, f"message {dm.id[:12]}… has {len(dm.room)} participants",
                            "too many participants")
        room = room_key(dm, self.me)
        if not await asyncio.to_thread(self.ledger.claim, dm.id, dm.sender, self.run_id, room):
            return Decision(Verdict.DUPLICATE, dm, f"message {dm.id[:12]}… received before", "duplicate")
        return Decision(Verdict.ANSWER, dm, f"message {dm.id[:12]}… from {dm.sender[:12]}…", room=room)

    async def reply(self, dm: DirectMessage, text: str, *, now: int, report: str | None = None,
                    extra_tags: Iterable[Sequence[str]] = ()) -> list[tuple[str, Event, bool]]:
        """The answer's gift wraps as ``(recipient, wrap, for_sender)``: one per participant of the conversation
        (the sender's decides delivery) and our own copy. The rumor tags every participant but us, answers
        ``dm`` (``e`` tag) and carries its ``subject`` and ``extra_tags``. ``report`` (a prompt report's content): one
        more wrap, to the sender only, carrying it as a prompt report answering the reply (prompt_report.py)."""
        others = sorted(dm.room - {self.me})
        rumor = make_message(self.me, others, text, created_at=now, reply_to=dm.id, subject=dm.subject,
                             extra_tags=extra_tags)
        wraps = await self.signer.wrap(rumor, now=now)
        out = [(pk, wrap, pk == dm.sender) for pk, wrap in wraps.items()]
        if report is not None:
            told = report_rumor(self.me, dm.sender, rumor.id, report, created_at=now)
            out.append((dm.sender, await self.signer.wrap_to(told, dm.sender, now=now), False))
        return out


@dataclass
class DropTally:
    """What was not answered, counted by cause, and when each cause is due a log line: its first, then at
    most one per ``interval_s`` carrying the running count (a flood of bad wraps is a few lines, not one per
    wrap)."""

    interval_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    counts: Counter[str] = field(default_factory=Counter)
    _logged: dict[str, tuple[float, int]] = field(default_factory=dict)  # cause -> (when, count then)

    def add(self, cause: str) -> int | None:
        """Count one; the running count when a line is due now, else None."""
        self.counts[cause] += 1
        return self._due(cause, self.clock())

    def _due(self, cause: str, now: float) -> int | None:
        count = self.counts[cause]
        last = self._logged.get(cause)
        if last is not None and (now - last[0] < self.interval_s or count == last[1]):
            return None
        self._logged[cause] = (now, count)
        return count

    def unlogged(self) -> dict[str, int]:
        """Every cause counted since its last line, whatever the interval (a final flush at stop)."""
        now = self.clock()
        out = {}
        for cause, count in self.counts.items():
            if self._logged.get(cause, (0.0, 0))[1] != count:
                self._logged[cause] = (now, count)
                out[cause] = count
        return out

    def pending(self) -> dict[str, int]:
        """Causes counted since their last line whose interval has passed (a periodic flush logs them)."""
        now = self.clock()
        out = {}
        for cause in list(self.counts):
            count = self._due(cause, now)
            if count is not None:
                out[cause] = count
        return out
