"""The admin's line to an agent that runs elsewhere (``didactyl attach``): NIP-17 direct messages from the admin's key
to the agent, and what comes back.

- Sending is attach_send.py's (the relays the agent reads, bounded; never elsewhere); :meth:`AttachLink.expect_reply`
  waits, from before a message is sent, for the reply that names it.
- Every gift wrap for the admin is judged here by who sealed it (attach_inbox.py): the agent's and the admin's own
  are opened, anyone else's is dropped after its outer layer. A kind 14 between the admin and the agent is a message
  of the conversation (the agent's reply, or the admin writing from another device); a prompt report from the agent
  (agent/dm/prompt_report.py) is kept, bounded, for the reply it names.
- :meth:`reply_to` and :meth:`report_for` wait, bounded, for the reply answering a message (its ``e`` tag) and for
  the report answering a reply; whatever nobody waits for goes to ``on_message``.
- :meth:`history` reads the relays back page by page (nostr/paging.py) until it holds the newest ``[attach]
  history`` messages of the conversation, or a bound (pages, bytes, time) ends it: a flood of newer wraps from
  strangers cannot fill a single query's ``limit`` and hide the conversation.
- Live wraps wait to be judged in a bounded intake; a wrap refused when it is full is not lost: once the intake has
  drained the relays are read again the same way (``catch-up``), so the agent's reply comes late, never not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..agent.dm.inbox import DropTally
from ..agent.dm.invitation import Outcome, outcome_of
from ..agent.dm.prompt_report import PROMPT_REPORT_KIND
from ..nostr.event import Event
from ..nostr.kinds import DIRECT_MESSAGE
from ..nostr.nip17 import gift_wrap_filter
from ..nostr.nip59 import MAX_BACKDATE_SECONDS, Rumor
from ..nostr.paging import BYTES, PAGES, TIME, PageBounds, PagedRead
from ..nostr.pool import PoolSubscription, RelayPool
from ..nostr.signer import Signer
from .attach_inbox import SignerWrapOpener, WrapIntake, WrapOpener

log = logging.getLogger("didactyl.attach")

LOOKBACK_S = MAX_BACKDATE_SECONDS + 3600  # wraps are backdated up to two days: look a little further
MAX_KEPT = 256  # reports kept for a reply nobody asked about yet
MAX_HANDLED = 50_000  # wrap ids judged (each is judged once; a flood's are remembered too)
BATCH = 128  # wraps judged together (one worker-thread hop with the key in hand)
CATCH_UP_ROUNDS = 8  # reads of the relays after the intake refused wraps, while it keeps refusing
DROP_LOG_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class LinkMessage:
    """A chat message between the admin and the agent, opened."""

    id: str
    from_agent: bool
    text: str
    created_at: int
    reply_to: str | None
    pairing: Outcome | None = None  # the agent's answer to an invitation (or a refusal): agent/dm/invitation.py


@dataclass(frozen=True, slots=True)
class LinkBounds:
    """What the link may hold and read: the history read's bounds (also a catch-up's), and the live intake's."""

    read: PageBounds = PageBounds()
    max_waiting: int = 4096
    max_waiting_bytes: int = 32 * 1024 * 1024


class AttachLink:
    def __init__(self, pool: RelayPool, admin: Signer, agent: str, *, timeout_s: float,
                 on_message: Callable[[LinkMessage], None], clock: Callable[[], float] = time.time,
                 opener: WrapOpener | None = None, bounds: LinkBounds = LinkBounds()) -> None:
        self._pool, self._admin, self.agent, self._timeout = pool, admin, agent, timeout_s
        self._on_message, self._clock = on_message, clock
        self._opener = opener or SignerWrapOpener(admin, agent)
        self._bounds = bounds
        self._intake = WrapIntake(bounds.max_waiting, bounds.max_waiting_bytes)
        self._reports: OrderedDict[str, Rumor] = OrderedDict()  # by the reply they describe
        self._waiters: dict[str, asyncio.Future[Any]] = {}
        self._handled: OrderedDict[str, None] = OrderedDict()  # wraps taken to be judged: each is judged once
        self._sub: PoolSubscription | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._catch_up: asyncio.Task[None] | None = None
        self._live_from: set[str] = set()  # relays past their first EOSE: what they send now is new
        self._history_read_from: set[str] | None = None  # relays the history read covered (None: all, so far)
        self._history_done = asyncio.Event()
        self._tally = DropTally(DROP_LOG_INTERVAL_S)
        self.strangers = 0  # wraps sealed by someone other than the agent or the admin: dropped unopened
        self.unreadable = 0
        self.history_cut = ""  # the bound that ended the last history read before it was complete ("": none)

    @property
    def admin(self) -> str:
        return self._admin.public_key

    @property
    def dropped(self) -> int:
        """Wraps the full intake refused (each read again from the relays once it drains)."""
        return self._intake.refused

    async def start(self) -> None:
        self._spawn(self._receive(), "attach-inbox")
        since = int(self._clock()) - LOOKBACK_S
        self._sub = self._pool.subscribe([gift_wrap_filter(self.admin, since=since)], self._arrived,
                                         on_eose=self._live_from.add)

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.close()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for waiter in self._waiters.values():
            waiter.cancel()
        for cause, count in self._tally.unlogged().items():
            log.info("attach: wraps for the admin not shown (%s): %d so far", cause, count)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- waiting -------------------------------------------------------------------------------------
    def expect_reply(self, message_id: str) -> None:
        """Wait for the reply to ``message_id`` from now on (before it is sent: an agent that answers before the send
        returns still finds its reply taken)."""
        self._waiters.setdefault(f"reply:{message_id}", asyncio.get_running_loop().create_future())

    def forget_reply(self, message_id: str) -> None:
        self._waiters.pop(f"reply:{message_id}", None)

    def already_shown(self, wrap: Event) -> None:
        """``wrap`` (the admin's own copy of a message sent from this window) is not shown again on its way back."""
        self._claim(wrap)

    async def reply_to(self, message_id: str, timeout: float) -> LinkMessage | None:
        """The agent's reply to ``message_id`` (None when none came within ``timeout``: a later one goes to
        ``on_message``)."""
        return await self._wait(OrderedDict(), f"reply:{message_id}", message_id, timeout)

    async def report_for(self, reply_id: str, timeout: float) -> Rumor | None:
        """The prompt report the agent sent for its reply ``reply_id`` (None when none came within ``timeout``)."""
        return await self._wait(self._reports, f"report:{reply_id}", reply_id, timeout)

    async def _wait(self, kept: OrderedDict[str, Any], key: str, ref: str, timeout: float) -> Any:
        if ref in kept:
            return kept.pop(ref)
        waiter = self._waiters.get(key)
        if waiter is None:
            waiter = self._waiters[key] = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            return None
        finally:
            self._waiters.pop(key, None)

    async def history(self, limit: int) -> list[LinkMessage]:
        """Up to ``limit`` past messages between the admin and the agent the relays hold, oldest first.

        The relays are read back page by page; each page's new wraps are judged (a stranger's dropped after its
        outer layer) and the conversation's opened, until the newest ``limit`` messages are certain (no unread wrap
        can hold a newer one: a wrap is dated at most two days before its message) or a bound ends the read
        (``history_cut`` then names it). The live subscription skips what this read covers."""
        try:
            if limit <= 0:
                return []
            found: dict[str, LinkMessage] = {}
            read = PagedRead(self._pool, gift_wrap_filter(self.admin), self._bounds.read,
                             query_timeout_s=self._timeout)
            try:
                async for page in read.pages():
                    for rumor in await self._judge([wrap for wrap in page.events if self._claim(wrap)]):
                        message = self._read(rumor)
                        if message is not None:
                            found[message.id] = message
                    if _newest_are_certain(found, limit, page.horizon):
                        break
            finally:
                self._history_read_from = set(read.answered)
            self.history_cut = read.ended if read.ended in (PAGES, BYTES, TIME) else ""
            if self.history_cut:
                log.info("attach: the history read stopped at its %s bound (%d pages, %d bytes, %d messages)",
                         self.history_cut, read.pages_read, read.bytes_read, len(found))
            return in_order(found.values())[-limit:]
        finally:
            self._history_done.set()

    # --- receiving -----------------------------------------------------------------------------------
    def _arrived(self, url: str, wrap: Event) -> None:
        if url not in self._live_from and (self._history_read_from is None or url in self._history_read_from):
            return  # stored before we subscribed: the history read covers it
        if wrap.id in self._handled:
            return
        if not self._intake.offer(wrap):
            self._note("refused: the intake was full; read again later")
            if self._catch_up is None or self._catch_up.done():
                self._catch_up = self._spawn(self._catch_up_refused(), "attach-catch-up")

    async def _receive(self) -> None:
        while True:
            batch = await self._intake.take(BATCH)
            try:
                for rumor in await self._judge([wrap for wrap in batch if self._claim(wrap)]):
                    self._opened(rumor)
            except Exception:  # one bad batch must not stop the inbox
                log.exception("attach: gift wraps for the admin were not handled")
            finally:
                self._intake.handled()

    async def _catch_up_refused(self) -> None:
        """Wraps the full intake refused are still on the relays: once it has drained (and the history read is
        over), read them back again, judging only what was never judged; again while it keeps refusing."""
        await self._history_done.wait()
        for _ in range(CATCH_UP_ROUNDS):
            await self._intake.drained()
            refused = self._intake.refused
            since = int(self._clock()) - LOOKBACK_S
            read = PagedRead(self._pool, gift_wrap_filter(self.admin, since=since), self._bounds.read,
                             query_timeout_s=self._timeout)
            async for page in read.pages():
                for rumor in await self._judge([wrap for wrap in page.events if self._claim(wrap)]):
                    self._opened(rumor)
            if self._intake.refused == refused:
                return

    def _claim(self, wrap: Event) -> bool:
        """Whether ``wrap`` is to be judged now (each wrap is judged once, whichever path brings it first)."""
        if wrap.id in self._handled:
            return False
        self._handled[wrap.id] = None
        if len(self._handled) > MAX_HANDLED:
            self._handled.popitem(last=False)
        return True

    async def _judge(self, wraps: list[Event]) -> list[Rumor]:
        """The rumors of the wraps sealed by the agent or the admin (the agent's first); the rest counted."""
        if not wraps:
            return []
        judged = await self._opener.judge(wraps)
        self.strangers += judged.strangers
        self.unreadable += len(judged.unreadable)
        for _ in range(judged.strangers):
            self._note("from strangers")
        for reason in judged.unreadable:
            self._note("unreadable", reason)
        for wrap in judged.not_judged:  # the signer failed: a later read may judge it
            self._handled.pop(wrap.id, None)
        if judged.not_judged:
            log.warning("attach: %d gift wraps for the admin were not opened: %s", len(judged.not_judged),
                        judged.signer_error)
        return judged.rumors

    def _note(self, cause: str, reason: str = "") -> None:
        count = self._tally.add(cause)
        if count is not None:
            log.info("attach: wraps for the admin not shown (%s): %d so far%s", cause, count,
                     f"; last: {reason}" if reason else "")

    def _read(self, rumor: Rumor) -> LinkMessage | None:
        """A message of this conversation (None for anything else; a report is kept for its reply)."""
        if rumor.kind == PROMPT_REPORT_KIND and rumor.pubkey == self.agent:
            reply_id = rumor.first_tag("e")
            if reply_id and not self._hand_over(f"report:{reply_id}", rumor):
                _keep(self._reports, reply_id, rumor)
            return None
        if rumor.kind != DIRECT_MESSAGE or {rumor.pubkey, *rumor.tag_values("p")} != {self.admin, self.agent}:
            return None  # another conversation of the admin's: not this window's
        from_agent = rumor.pubkey == self.agent
        return LinkMessage(rumor.id, from_agent, rumor.content, rumor.created_at, rumor.first_tag("e"),
                           outcome_of(rumor) if from_agent else None)

    def _opened(self, rumor: Rumor) -> None:
        message = self._read(rumor)
        if message is None:
            return
        if message.from_agent and message.reply_to and self._hand_over(f"reply:{message.reply_to}", message):
            return
        self._on_message(message)

    def _hand_over(self, key: str, value: Any) -> bool:
        waiter = self._waiters.get(key)
        if waiter is None or waiter.done():
            return False
        waiter.set_result(value)
        return True


def in_order(messages: Iterable[LinkMessage]) -> list[LinkMessage]:
    """Oldest first. Dates are in seconds: within one second a message comes before the agent's replies to it, and
    a reply to an earlier message before the admin's messages (the admin writes after reading it)."""
    by_second: dict[int, list[LinkMessage]] = {}
    for message in messages:
        by_second.setdefault(message.created_at, []).append(message)
    ordered: list[LinkMessage] = []
    for second in sorted(by_second):
        group = sorted(by_second[second], key=lambda m: m.id)
        asked = {m.id for m in group if not m.from_agent}
        replies: dict[str, list[LinkMessage]] = {}
        for m in group:
            if m.from_agent and m.reply_to in asked:
                replies.setdefault(m.reply_to or "", []).append(m)
        ordered += [m for m in group if m.from_agent and m.reply_to not in asked]
        for m in group:
            if not m.from_agent:
                ordered += [m, *replies.get(m.id, [])]
    return ordered


def _newest_are_certain(found: dict[str, LinkMessage], limit: int, horizon: int | None) -> bool:
    """Whether the newest ``limit`` messages found can no longer change: an unread wrap is dated at or before
    ``horizon``, and a wrap is dated at most two days before its message (NIP-59)."""
    if horizon is None:
        return True
    if len(found) < limit:
        return False
    newest = sorted((m.created_at for m in found.values()), reverse=True)
    return newest[limit - 1] >= horizon + MAX_BACKDATE_SECONDS


def _keep(kept: OrderedDict[str, Any], key: str, value: Any) -> None:
    kept[key] = value
    while len(kept) > MAX_KEPT:
        kept.popitem(last=False)
