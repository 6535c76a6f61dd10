"""The admin's line to an agent that runs elsewhere (``didactyl attach``): NIP-17 direct messages from the admin's key
to the agent, and what comes back.

- :meth:`AttachLink.send` wraps a message for the agent (and the admin's own copy, so other devices see it) and
  publishes the agent's wrap where the agent reads (its kind 10050, else the relays in use); it counts as sent only
  once one of those relays took it.
- Every gift wrap for the admin is opened here: a kind 14 between the admin and the agent is a message of the
  conversation (the agent's reply, or the admin writing from another device); a prompt report from the agent
  (agent/dm/prompt_report.py) is kept, bounded, for the reply it names.
- :meth:`reply_to` and :meth:`report_for` wait, bounded, for the reply answering a message (its ``e`` tag) and for
  the report answering a reply; whatever nobody waits for goes to ``on_message``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..agent.dm.prompt_report import PROMPT_REPORT_KIND
from ..errors import AgentError, DidactylError
from ..nostr.event import Event
from ..nostr.kinds import DIRECT_MESSAGE
from ..nostr.nip17 import delivery_relays, dm_relay_list_filter, gift_wrap_filter, make_message, wrap_message_with
from ..nostr.nip59 import MAX_BACKDATE_SECONDS, Rumor, UnwrapError, unwrap_with
from ..nostr.pool import PoolSubscription, RelayPool
from ..nostr.signer import Signer

log = logging.getLogger("didactyl.attach")

LOOKBACK_S = MAX_BACKDATE_SECONDS + 3600  # wraps are backdated up to two days: look a little further
MAX_KEPT = 256  # reports kept for a reply nobody asked about yet
MAX_HANDLED = 20_000
QUEUE = 256


@dataclass(frozen=True, slots=True)
class LinkMessage:
    """A chat message between the admin and the agent, opened."""

    id: str
    from_agent: bool
    text: str
    created_at: int
    reply_to: str | None


class AttachLink:
    def __init__(self, pool: RelayPool, admin: Signer, agent: str, *, timeout_s: float,
                 on_message: Callable[[LinkMessage], None], clock: Callable[[], float] = time.time,
                 open_pool: Callable[[list[str]], contextlib.AbstractAsyncContextManager[RelayPool]] | None = None,
                 ) -> None:
        self._pool, self._admin, self.agent, self._timeout = pool, admin, agent, timeout_s
        self._on_message, self._clock = on_message, clock
        self._open_pool = open_pool or (lambda urls: RelayPool(urls[:8]))
        self._incoming: asyncio.Queue[Event] = asyncio.Queue(QUEUE)
        self._reports: OrderedDict[str, Rumor] = OrderedDict()  # by the reply they describe
        self._waiters: dict[str, asyncio.Future[Any]] = {}
        self._handled: OrderedDict[str, None] = OrderedDict()
        self._sub: PoolSubscription | None = None
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self._agent_relays: list[str] = []

    @property
    def admin(self) -> str:
        return self._admin.public_key

    async def start(self) -> None:
        self._task = asyncio.create_task(self._receive(), name="attach-inbox")
        since = int(self._clock()) - LOOKBACK_S
        self._sub = self._pool.subscribe([gift_wrap_filter(self.admin, since=since)], self._arrived)
        with contextlib.suppress(DidactylError, TimeoutError):
            await self.refresh_agent_relays()

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.close()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for waiter in self._waiters.values():
            waiter.cancel()

    async def refresh_agent_relays(self) -> list[str]:
        """The agent's kind 10050 relays (where it reads its direct messages), as the relays in use know them."""
        lists = [ev for ev in await self._pool.query([dm_relay_list_filter([self.agent])], timeout=self._timeout)
                 if ev.pubkey == self.agent]
        self._agent_relays = delivery_relays(lists[0] if lists else None, self._pool.urls)
        return self._agent_relays

    # --- sending -------------------------------------------------------------------------------------
    async def send(self, text: str) -> str:
        """Send ``text`` to the agent; its rumor id (what the reply's ``e`` tag names). AgentError when no relay
        the agent reads took it (nothing is half sent: the admin's own copy goes only after)."""
        now = int(self._clock())
        try:
            rumor = make_message(self.admin, [self.agent], text, created_at=now)
            wraps = await wrap_message_with(rumor, self._admin, now=now)
        except DidactylError as exc:
            raise AgentError(f"the message was not sent: {exc.message}", "Not sent") from None
        targets = self._agent_relays or self._pool.urls
        # Waited for from now: an agent that answers before this returns still finds its reply taken.
        self._waiters[f"reply:{rumor.id}"] = asyncio.get_running_loop().create_future()
        accepted, detail = await self._publish(wraps[self.agent], targets)
        if not accepted:
            self._waiters.pop(f"reply:{rumor.id}", None)
            raise AgentError(f"the message did not reach the agent: no relay it reads took it ({detail})", "Not sent")
        self._handled[wraps[self.admin].id] = None  # our own copy, when it comes back, is already in the chat
        with contextlib.suppress(DidactylError):
            await self._pool.publish(wraps[self.admin], self._timeout)
        return rumor.id

    async def _publish(self, wrap: Event, targets: list[str]) -> tuple[bool, str]:
        ours = [u for u in targets if u in self._pool.urls]
        theirs = [u for u in targets if u not in self._pool.urls]
        details: list[str] = []
        if ours:
            outcome = await self._pool.publish(wrap, self._timeout, urls=ours)
            if outcome.any_accepted:
                return True, outcome.summary()
            details.append(outcome.summary())
        if theirs:
            try:
                async with self._open_pool(theirs) as pool:
                    await pool.wait_connected(self._timeout, all_relays=False)
                    outcome = await pool.publish(wrap, self._timeout)
                if outcome.any_accepted:
                    return True, outcome.summary()
                details.append(outcome.summary())
            except Exception as exc:  # an unusable URL or socket: not sent there
                details.append(f"{', '.join(theirs)}: {exc}")
        return False, "; ".join(details) or "no relay to send to"

    # --- waiting -------------------------------------------------------------------------------------
    async def reply_to(self, message_id: str, timeout: float) -> LinkMessage | None:
        """The agent's reply to ``message_id`` sent by :meth:`send` (None when none came within ``timeout``: a
        later one goes to ``on_message``)."""
        return await self._wait({}, f"reply:{message_id}", message_id, timeout)

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
        """Up to ``limit`` past messages between the admin and the agent the relays hold, oldest first (opened a
        few at a time; the live subscription skips them after)."""
        if limit <= 0:
            return []
        wraps = await self._pool.query([{**gift_wrap_filter(self.admin), "limit": min(4 * limit, 5_000)}],
                                       timeout=self._timeout)
        opening = asyncio.Semaphore(8)
        messages: list[LinkMessage] = []

        async def one(wrap: Event) -> None:
            if wrap.id in self._handled:
                return
            self._handled[wrap.id] = None
            async with opening:
                try:
                    rumor = (await unwrap_with(wrap, self._admin)).rumor
                except DidactylError:
                    return
            message = self._read(rumor)
            if message is not None:
                messages.append(message)

        async with asyncio.TaskGroup() as tg:
            for wrap in wraps:
                tg.create_task(one(wrap))
        messages.sort(key=lambda m: (m.created_at, not m.from_agent))
        return messages[-limit:]

    # --- receiving -----------------------------------------------------------------------------------
    def _arrived(self, url: str, wrap: Event) -> None:
        if wrap.id in self._handled:
            return
        try:
            self._incoming.put_nowait(wrap)
        except asyncio.QueueFull:
            self.dropped += 1  # bounded: a flood of wraps for the admin is counted, not held

    async def _receive(self) -> None:
        while True:
            wrap = await self._incoming.get()
            if wrap.id in self._handled:
                continue
            self._handled[wrap.id] = None
            if len(self._handled) > MAX_HANDLED:
                self._handled.popitem(last=False)
            try:
                opened = await unwrap_with(wrap, self._admin)
            except UnwrapError as exc:
                log.info("attach: a gift wrap for the admin was not read: %s", exc.message)
                continue
            except DidactylError as exc:
                log.warning("attach: a gift wrap for the admin was not opened: %s", exc.message)
                continue
            self._opened(opened.rumor)

    def _read(self, rumor: Rumor) -> LinkMessage | None:
        """A message of this conversation (None for anything else; a report is kept for its reply)."""
        if rumor.kind == PROMPT_REPORT_KIND and rumor.pubkey == self.agent:
            reply_id = rumor.first_tag("e")
            if reply_id and not self._hand_over(f"report:{reply_id}", rumor):
                _keep(self._reports, reply_id, rumor)
            return None
        if rumor.kind != DIRECT_MESSAGE or {rumor.pubkey, *rumor.tag_values("p")} != {self.admin, self.agent}:
            return None  # another conversation of the admin's: not this window's
        return LinkMessage(rumor.id, rumor.pubkey == self.agent, rumor.content, rumor.created_at, rumor.first_tag("e"))

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


def _keep(kept: OrderedDict[str, Any], key: str, value: Any) -> None:
    kept[key] = value
    while len(kept) > MAX_KEPT:
        kept.popitem(last=False)
