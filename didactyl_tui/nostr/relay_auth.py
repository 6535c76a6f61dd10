"""NIP-42 for one relay connection: the relay's challenge, our signed answer, and whether the relay took it.

The relay sends ``["AUTH", challenge]`` (handed here by :mod:`.relay_incoming`); a publish or a subscription that the
relay refused with ``auth-required:`` asks :meth:`Nip42Auth.authenticate`, which signs a kind-22242 event for the
challenge (with a secret key, or through a remote signer, bounded by the caller's deadline), sends it and waits for
the relay's OK. Once per connection: concurrent callers share one attempt, and a new connection starts afresh.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ..errors import DidactylError
from .event import sign_event
from .keys import SecretKey
from .kinds import CLIENT_AUTH
from .messages import ClientAuth
from .relay_link import RelayLink

if TYPE_CHECKING:  # only named in annotations: the signer's module (and NIP-44) loads with the agent
    from .signer import Signer

OkAnswer = tuple[bool | None, str]  # (accepted, reason); accepted None: no answer (timeout, connection lost)


class Nip42Auth:
    """Authentication on one relay's connections, with ``key`` (None: this client never authenticates)."""

    def __init__(self, link: RelayLink, key: SecretKey | Signer | None) -> None:
        self._link = link
        self.key = key
        self._challenge: str | None = None  # the current connection's
        self._authed = False
        self._task: asyncio.Task[tuple[bool, str]] | None = None
        self._answers: dict[str, asyncio.Future[OkAnswer]] = {}  # our AUTH event's id -> the relay's OK

    @property
    def authenticated(self) -> bool:
        return self._authed

    # --- what the connection and the incoming frames tell it ------------------------------------
    def reset(self) -> None:
        """A new connection: no challenge yet, not authenticated."""
        self._challenge, self._authed, self._task = None, False, None

    def cancel(self) -> None:
        """The connection ended: an attempt in progress ends with it."""
        if self._task is not None:
            self._task.cancel()

    def challenged(self, challenge: str) -> None:
        self._challenge = challenge
        self._link.notify()

    def answered(self, event_id: str, accepted: bool, reason: str) -> None:
        """The relay's OK for ``event_id`` (ignored unless it is our AUTH event)."""
        fut = self._answers.get(event_id)
        if fut is not None and not fut.done():
            fut.set_result((accepted, reason))

    # --- what publishes and subscriptions ask of it --------------------------------------------
    async def authenticate(self, deadline: float) -> tuple[bool, str]:
        """Answer the relay's AUTH challenge (once per connection; concurrent callers share it)."""
        if self.key is None:
            return False, "no key to authenticate with"
        if self._authed:
            return True, ""
        task = self._task
        if task is None or task.done():
            task = self._task = asyncio.get_running_loop().create_task(self._send_auth(self.key, deadline))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # the connection dropped; our own caller was not cancelled
                return False, "connection lost during authentication"
            raise

    async def _send_auth(self, key: SecretKey | Signer, deadline: float) -> tuple[bool, str]:
        link = self._link
        if not await link.wait_for(lambda: self._challenge is not None or not link.connected, deadline):
            return False, "the relay sent no AUTH challenge"
        if not link.connected or self._challenge is None:
            return False, "not connected"
        tags = [["relay", link.url], ["challenge", self._challenge]]
        if isinstance(key, SecretKey):
            auth = sign_event(key, kind=CLIENT_AUTH, content="", created_at=int(time.time()), tags=tags)
        else:  # a key behind a signer (NIP-46: a round trip), bounded like the rest of the sign-in
            try:
                async with asyncio.timeout_at(deadline):
                    auth = await key.sign_event(kind=CLIENT_AUTH, content="", created_at=int(time.time()), tags=tags)
            except TimeoutError:
                return False, "the signer did not sign our AUTH in time"
            except DidactylError as exc:
                return False, f"the signer did not sign our AUTH: {exc.message}"
        fut: asyncio.Future[OkAnswer] = asyncio.get_running_loop().create_future()
        self._answers[auth.id] = fut
        try:
            link.send(ClientAuth.of(auth))
            try:
                async with asyncio.timeout_at(deadline):
                    accepted, reason = await asyncio.shield(fut)
            except TimeoutError:
                return False, "the relay did not answer our AUTH"
        finally:
            self._answers.pop(auth.id, None)
        self._authed = bool(accepted)
        return self._authed, reason
