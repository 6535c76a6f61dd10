"""What the agent answers without the model: an invitation presented in a direct message (pairing), and a key it does
not answer (a refusal, bounded). Part of :class:`~.dm.DmService`, which hands it every judged message first.

- An invitation (agent/dm/invitation.py) in a one-to-one message is taken once: the presenter is written into the
  config's ``[admin] pubkey`` (config_write.py: the rest of the file kept) and the rights are followed at once
  (live_policy.py: the inbox, the admin's context, the embedded relay's allow-list). The answer says "paired" with
  the fingerprint, as serve's log does. The message never reaches the model. From the admin already: "already
  paired", nothing taken. Not taken: the answer says why (a refusal, below, unless the sender is a guest).
- A one-to-one message from a key the agent does not answer gets one refusal, bounded (:class:`RefusalBudget`): at
  most ``[dm] refusals_per_hour`` in all and one per sender in :data:`REPEAT_S`. It is sent once to the agent's own
  relays (never to hosts the stranger names), never retried, and nothing of it is stored: a flood of strangers costs
  at most that many small replies an hour. Relays that take gift wraps only for known keys (the embedded relay's
  allow-list) refuse it; ``attach`` then says, from its own copy's refusal, that the agent's relay takes nothing for
  its key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from ..agent.dm.delivery import DmDelivery
from ..agent.dm.inbox import Decision, DmInbox, Verdict
from ..agent.dm.invitation import PAIRING_TAG, Outcome, Redeemed, fingerprint, invitation_of, redeem
from ..config import Config
from ..config_write import set_config_value
from ..errors import DidactylError
from ..nostr.nip17 import DirectMessage, make_message
from ..nostr.nip19 import encode_npub
from ..nostr.pool import RelayPool
from .live_policy import LivePolicy

log = logging.getLogger("didactyl.dm")

REPEAT_S = 6 * 3600.0  # one refusal per sender in this time
MAX_SENDERS = 4096  # senders remembered for REPEAT_S (the oldest forgotten first; the hourly bound still holds)
NOT_ANSWERED = ("This agent answers only its admin and the keys its config allows: your message was not given to "
                "it. If the agent is yours, pair this key with it: run the `didactyl attach … --invite …` line its "
                "`didactyl serve` printed, or `didactyl invite` where it runs for a new one.")


class RefusalBudget:
    """At most ``per_hour`` refusals in all (a bucket refilled evenly, holding at most an hour's worth), and one per
    sender per ``repeat_s``."""

    def __init__(self, per_hour: int, *, repeat_s: float = REPEAT_S, clock: Callable[[], float] = time.monotonic,
                 max_senders: int = MAX_SENDERS) -> None:
        self._rate, self._repeat_s, self._clock, self._max = per_hour / 3600.0, repeat_s, clock, max_senders
        self._capacity = float(per_hour)
        self._tokens, self._at = float(per_hour), clock()
        self._told: OrderedDict[str, float] = OrderedDict()
        self.withheld = 0  # refusals not sent because of the bound

    def take(self, sender: str) -> bool:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._rate)
        self._at = now
        last = self._told.get(sender)
        if self._tokens < 1 or (last is not None and now - last < self._repeat_s):
            self.withheld += 1
            return False
        self._tokens -= 1
        self._told[sender] = now
        self._told.move_to_end(sender)
        while len(self._told) > self._max:
            self._told.popitem(last=False)
        return True


class DmPairing:
    def __init__(self, inbox: DmInbox, delivery: DmDelivery, pool: RelayPool, policy: LivePolicy, config: Config,
                 data_dir: Path, clock: Callable[[], float],
                 spawn: Callable[[Coroutine[Any, Any, None]], Any]) -> None:
        self._inbox, self._delivery, self._pool, self._policy = inbox, delivery, pool, policy
        self._data_dir, self._clock, self._spawn = data_dir, clock, spawn
        self._timeout = config.relays.timeout_s
        self.budget = RefusalBudget(config.dm.refusals_per_hour)

    @property
    def _me(self) -> str:
        return self._inbox.me

    async def take(self, decision: Decision) -> bool:
        """Whether the message was handled here (an invitation: never the model's). A stranger's one-to-one message
        is also refused here (bounded), and left to the caller's counts (False)."""
        dm = decision.message
        if dm is None or decision.verdict not in (Verdict.ANSWER, Verdict.STRANGER):
            return False
        if dm.room - {self._me} != {dm.sender}:  # a group: no pairing, no refusal
            return False
        presented = invitation_of(dm.rumor)
        if presented is not None:
            await self._pair(dm, presented, claimed=decision.verdict is Verdict.ANSWER)
            return True
        if decision.verdict is Verdict.STRANGER:
            self._refuse(dm, NOT_ANSWERED)
        return False

    async def _pair(self, dm: DirectMessage, presented: str, *, claimed: bool) -> None:
        rights = await self._policy.refresh()
        who, mark = encode_npub(dm.sender), fingerprint(self._me, dm.sender)
        if rights.dm.admin == dm.sender:
            await self._answer(dm, f"Already paired: this key is the agent's admin (fingerprint {mark}).",
                               Outcome.ALREADY_PAIRED, claimed=claimed)
            return
        path = self._policy.path
        result = Redeemed(False, "this agent has no config file to write its admin into")
        if path is not None:
            try:
                result = await asyncio.to_thread(redeem, self._data_dir, presented, sender=dm.sender,
                                                 admin_now=rights.dm.admin, now=int(time.time()))
            except DidactylError as exc:
                result = Redeemed(False, f"the agent cannot read its invitation ({exc.message})")
        if result.ok and path is not None:
            try:
                await asyncio.to_thread(set_config_value, path, "admin", "pubkey", who)
            except DidactylError as exc:  # the invitation is used: fail closed
                result = Redeemed(False, f"the agent could not write its config ({exc.message})")
        if not result.ok:
            log.info("pairing refused: message %s… from %s: %s", dm.id[:12], who, result.reason)
            text = f"Not paired: {result.reason}. Where the agent runs, `didactyl invite` prints a new attach line."
            if claimed:  # a guest: answered like any of their messages
                await self._answer(dm, text, Outcome.REFUSED, claimed=True)
            else:
                self._refuse(dm, text)
            return
        now_admin = (await self._policy.refresh()).dm.admin
        log.info("paired: %s is now the agent's admin ([admin] pubkey written to %s); fingerprint %s (the attached "
                 "app shows the same)", who, path, mark)
        if now_admin != dm.sender:
            log.warning("pairing: %s does not make %s the admin (the environment or the file says otherwise)", path,
                        who)
        await self._answer(dm, f"Paired: this key is now the agent's admin. Fingerprint {mark} (the agent's "
                               "`didactyl serve` log shows the same).", Outcome.PAIRED, claimed=claimed)

    async def _answer(self, dm: DirectMessage, text: str, outcome: Outcome, *, claimed: bool) -> None:
        """Through the ledger and its delivery, as any reply: written once, retried until a relay takes it."""
        inbox, ledger = self._inbox, self._inbox.ledger
        if not claimed and not await asyncio.to_thread(ledger.claim, dm.id, dm.sender, inbox.run_id, dm.sender):
            return  # answered before
        if not await asyncio.to_thread(ledger.start_answering, dm.id, inbox.run_id):
            return
        wraps = await inbox.reply(dm, text, now=int(self._clock()), extra_tags=[(PAIRING_TAG, outcome.value)])
        if await asyncio.to_thread(ledger.write_reply, dm.id, inbox.run_id, wraps):
            self._delivery.wake()

    def _refuse(self, dm: DirectMessage, text: str) -> None:
        if self.budget.take(dm.sender):
            self._spawn(self._send_refusal(dm, text))

    async def _send_refusal(self, dm: DirectMessage, text: str) -> None:
        now = int(self._clock())
        try:
            rumor = make_message(self._me, [dm.sender], text, created_at=now, reply_to=dm.id,
                                 extra_tags=[(PAIRING_TAG, Outcome.REFUSED.value)])
            wrap = await self._inbox.signer.wrap_to(rumor, dm.sender, now=now)
            outcome = await self._pool.publish(wrap, self._timeout)
        except DidactylError as exc:
            log.info("dm refusal to %s… not sent: %s", dm.sender[:12], exc.message)
            return
        log.info("dm refusal to %s… for message %s…: %s", dm.sender[:12], dm.id[:12], outcome.summary())
