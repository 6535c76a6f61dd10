"""Sending to an agent that runs elsewhere (``attach``): a message is prepared once — signed and wrapped, its rumor id
fixed — and delivered to the relays the agent reads, bounded in time, never anywhere else.

- The relays are those found before anything is sent (agent_address.py), and the agent's kind 10050 as the relays in
  use know it when it is newer; never this app's own relays as a stand-in (a message there reaches nobody).
- :meth:`AgentPost.deliver` counts a message as delivered only once one of those relays took the agent's wrap, within
  ``[attach] send_timeout_s`` (connecting included); otherwise it says each relay's answer. The same prepared message
  may be delivered again any number of times: the same wrap, so the agent sees and answers one message.
- The admin's own copy goes after (so other devices see the conversation). When every relay of the agent's that
  answered refused it as ``blocked:``, replies to this key cannot arrive there either: :class:`Delivery` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ..agent.dm.undelivered import Outgoing
from ..errors import AgentError, DidactylError
from ..nostr.event import Event
from ..nostr.messages import Prefix
from ..nostr.nip17 import dm_relay_list_filter, dm_relays_of, make_message, wrap_message_with
from ..nostr.pool import PoolSubscription, RelayPool
from ..nostr.results import PublishOutcome, Verdict
from ..nostr.signer import Signer
from ..terminal_text import one_line

MAX_OTHER_RELAYS = 8  # relays of the agent's outside the pool, reached through a short-lived one


@dataclass(frozen=True, slots=True)
class Delivery:
    ok: bool
    detail: str  # the relays' answers, one line
    own_copy_refused: str = ""  # the agent's relays refuse gift wraps for this key ("": they took it, or no copy)


class AgentPost:
    def __init__(self, pool: RelayPool, admin: Signer, agent: str, relays: Sequence[str], *, timeout_s: float,
                 send_timeout_s: float, clock: Callable[[], float], never: Callable[[], Collection[str]] = tuple,
                 open_pool: Callable[[list[str]], contextlib.AbstractAsyncContextManager[RelayPool]] | None = None,
                 ) -> None:
        """``never``: the relays that are not the agent's whatever its lists say (this app's own), asked at each use:
        the embedded relay may come back on another port while the app runs."""
        self._pool, self._admin, self.agent = pool, admin, agent
        self._timeout, self._send_timeout, self._clock = timeout_s, send_timeout_s, clock
        self._open_pool = open_pool or (lambda urls: RelayPool(urls[:MAX_OTHER_RELAYS]))
        self._never = never
        self._named: list[str] = list(relays)  # the relays the agent's address or its kind 10050 names
        self._listed_at = -1  # the newest kind 10050 of the agent's taken

    @property
    def relays(self) -> list[str]:
        """Where the agent reads its DMs: the relays named, but never this app's own as it is now."""
        never = self._never()
        return [u for u in self._named if u not in never]

    @property
    def admin(self) -> str:
        return self._admin.public_key

    async def refresh(self) -> list[str]:
        """The agent's kind 10050 as the relays in use hold it, when there is one (else the relays known stay)."""
        for ev in await self._pool.query([dm_relay_list_filter([self.agent])], timeout=self._timeout):
            self.take_list(ev)
        return self.relays

    def follow(self, on_change: Callable[[], None]) -> PoolSubscription:
        """Take each newer kind 10050 of the agent's the relays in use send (one it publishes while attached), and
        call ``on_change`` when it names other relays."""
        def listed(url: str, ev: Event) -> None:
            if self.take_list(ev):
                on_change()

        return self._pool.subscribe([dm_relay_list_filter([self.agent])], listed)

    def take_list(self, ev: Event) -> bool:
        """Use ``ev`` (a kind 10050) when it is the agent's, newer than the last taken and names relays; whether the
        relays changed."""
        never = self._never()
        named = dm_relays_of(ev)
        if ev.pubkey != self.agent or ev.created_at <= self._listed_at or not [u for u in named if u not in never]:
            return False
        self._listed_at = ev.created_at
        before = self.relays
        self._named = list(named)
        return self.relays != before

    async def prepare(self, text: str, *, tags: Sequence[Sequence[str]] = (), own_copy: bool = True) -> Outgoing:
        """``text`` signed and wrapped for the agent (and the admin's own copy); AgentError when it cannot be."""
        now = int(self._clock())
        try:
            rumor = make_message(self.admin, [self.agent], text, created_at=now, extra_tags=tags)
            wraps = await wrap_message_with(rumor, self._admin, now=now, copy_to_self=own_copy)
        except DidactylError as exc:
            raise AgentError(f"the message was not sent: {exc.message}", "Not sent") from None
        return Outgoing(rumor.id, now, text, wraps[self.agent], wraps.get(self.admin))

    async def deliver(self, message: Outgoing) -> Delivery:
        """To the relays the agent reads, within ``send_timeout_s``; then the admin's own copy."""
        if not self.relays:
            return Delivery(False, "no relay of the agent's is known")
        try:
            async with asyncio.timeout(self._send_timeout):
                accepted, detail = await self._publish(message.wrap, self.relays)
        except TimeoutError:
            return Delivery(False, f"no relay the agent reads took it within {self._send_timeout:g} s "
                                   f"({', '.join(self.relays)})")
        if not accepted:
            return Delivery(False, detail)
        refused = ""
        if message.own_copy is not None:
            with contextlib.suppress(DidactylError):
                refused = _blocked_by_all(await self._pool.publish(message.own_copy, self._timeout), self.relays)
        return Delivery(True, detail, refused)

    async def _publish(self, wrap: Event, targets: list[str]) -> tuple[bool, str]:
        ours = [u for u in targets if u in self._pool.urls]
        theirs = [u for u in targets if u not in self._pool.urls]
        details: list[str] = []
        if ours:
            outcome = await self._pool.publish(wrap, self._timeout, urls=ours)
            if outcome.any_accepted:
                return True, f"taken by {', '.join(outcome.accepted_by)}"
            details.append(_answers(outcome))
        if theirs:
            try:
                async with self._open_pool(theirs) as pool:
                    await pool.wait_connected(self._timeout, all_relays=False)
                    outcome = await pool.publish(wrap, self._timeout)
                if outcome.any_accepted:
                    return True, f"taken by {', '.join(outcome.accepted_by)}"
                details.append(_answers(outcome))
            except Exception as exc:  # an unusable URL or socket: not sent there
                details.append(f"{', '.join(theirs)}: {exc}")
        return False, f"no relay of the agent's took it ({'; '.join(details) or 'none to send to'})"


def _blocked_by_all(outcome: PublishOutcome, relays: Sequence[str]) -> str:
    """The refusals when every relay of the agent's that answered refused the wrap as ``blocked:`` ("" otherwise)."""
    answers = [v for url, v in outcome.results.items()
               if url in relays and v.verdict in (Verdict.ACCEPTED, Verdict.REJECTED)]
    if not answers or any(v.verdict is not Verdict.REJECTED or v.prefix is not Prefix.BLOCKED for v in answers):
        return ""
    return "; ".join(f"{v.url}: {one_line(v.message)[:200]}" for v in answers)


def _answers(outcome: PublishOutcome) -> str:
    """Each relay's answer, one line (outside words cleaned)."""
    parts = []
    for url, verdict in outcome.results.items():
        why = one_line(verdict.message)[:200]
        parts.append(f"{url}: {verdict.verdict.value.replace('_', ' ')}{': ' + why if why else ''}")
    return "; ".join(parts)


class AlreadyDelivered(AgentError):
    """A Retry of a message that went by itself meanwhile: not sent twice."""

    def __init__(self) -> None:
        super().__init__("it reached the agent's relays already (delivered late): its reply shows here when it comes",
                         "Already delivered")
