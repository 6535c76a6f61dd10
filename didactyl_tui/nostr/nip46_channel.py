"""A NIP-46 client's requests and the signer's replies, over the signer's relays (the I/O under
:class:`~.remote_signer.RemoteSigner`).

Requests go out as kind 24133 events through a :class:`~.pool.RelayPool` of the channel's own (authenticated with
the client key when a relay asks); replies come back on one live subscription. Only the first reply to a request
counts (two signers holding one key both answer), later ones are counted. Moving to other relays keeps the old ones
until the requests sent through them are answered.

Every request has one deadline. It waits at most ``request_timeout``; once the signer sends an ``auth_url`` (handed
to ``on_auth_url`` for the person to open), at most ``auth_timeout`` in all, counted from when it was sent. Further
challenges never move that deadline (a signer sending a new ``auth_url`` every few seconds would otherwise keep a
save waiting for ever), and at most :data:`MAX_AUTH_URLS_SHOWN` of them are shown; only the person moves it
(:meth:`SignerChannel.wait_longer`). When it passes, the request fails with one line saying what the signer did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..errors import NostrError, SignerRefusedError, SignerUnreachableError
from ..terminal_text import clean_link, one_line
from . import nip46
from .event import Event
from .keys import SecretKey
from .nip46 import Method, Request, Response
from .pool import PoolSubscription, RelayPool
from .subscription import call_safely

log = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT_S = 30.0  # a signer on a phone may wait for a tap; on loopback a reply takes ~20 ms
DEFAULT_AUTH_TIMEOUT_S = 300.0  # after an auth_url: the person has to open it and approve
DEFAULT_READY_TIMEOUT_S = 5.0  # how long to wait for a relay to take our subscription
MAX_ERROR_CHARS = 300  # a signer's error text, as shown
MAX_AUTH_URL_CHARS = 2048
MAX_AUTH_URLS_SHOWN = 3  # distinct auth_url challenges of one request handed to the app (others are counted)
_VERBS = {"sign_event": "sign", "nip44_encrypt": "encrypt", "nip44_decrypt": "decrypt"}


@dataclass(frozen=True, slots=True)
class AuthChallenge:
    """The signer wants the person to open ``url`` (to log in or approve) before it answers ``method``; the request
    waits ``wait_s`` more seconds at most (:meth:`SignerChannel.wait_longer` gives it more)."""

    url: str
    method: str
    wait_s: float = 0.0


AuthCallback = Callable[[AuthChallenge], None]


@dataclass(eq=False)
class _Pending:
    method: str
    reply: asyncio.Future[Response]
    pool: RelayPool
    sent_at: float  # the loop's time
    allowed: float  # seconds it may wait in all, from sent_at
    timeout: asyncio.Timeout | None = None
    auth_urls: set[str] = field(default_factory=set)  # the challenges shown (at most MAX_AUTH_URLS_SHOWN)
    challenges: int = 0  # every auth_url reply, shown or not
    last_url: str = ""

    def extend_to(self, allowed: float) -> None:
        """Wait until ``allowed`` seconds after it was sent, if that is later than now set."""
        if allowed > self.allowed:
            self.allowed = allowed
            if self.timeout is not None:
                self.timeout.reschedule(self.sent_at + allowed)


@dataclass(eq=False)
class _Link:
    """The signer's relays: a pool and the subscription that hears the replies."""

    pool: RelayPool
    subscription: PoolSubscription

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.subscription.close()
        await self.pool.close()


class SignerChannel:
    """Requests to the signer ``signer_pubkey`` from ``client_key``, and their replies. ``client_kwargs`` go to
    each :class:`~.relay.RelayClient` (timeouts, backoff); ``request_timeout`` may be changed between requests."""

    def __init__(
        self,
        client_key: SecretKey,
        signer_pubkey: str,
        *,
        on_auth_url: AuthCallback | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        auth_timeout: float = DEFAULT_AUTH_TIMEOUT_S,
        ready_timeout: float = DEFAULT_READY_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        client_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if request_timeout <= 0 or auth_timeout <= 0 or ready_timeout < 0:
            raise NostrError("remote signer timeouts must be positive", "Remote signer")
        self._client_key = client_key
        self.signer_pubkey = signer_pubkey
        self._ck = nip46.conversation_key(client_key, signer_pubkey)
        self.on_auth_url = on_auth_url
        self.request_timeout = request_timeout
        self.auth_timeout = auth_timeout
        self.ready_timeout = ready_timeout
        self._clock = clock
        self._client_kwargs = dict(client_kwargs or {})
        self._pending: dict[str, _Pending] = {}
        self._link: _Link | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        #: requests sent, replies taken, late_replies (a second answer, or one nobody waits for),
        #: auth_urls, dropped (not a reply we can read)
        self.counts: Counter[str] = Counter()

    @property
    def connected(self) -> bool:
        return self._link is not None

    async def connect(self, relays: Sequence[str]) -> None:
        """Connect to ``relays`` and subscribe to the signer's replies (waits at most ``ready_timeout`` for a relay
        to take the subscription; a signer that is away is no error here, its requests will say)."""
        if self._link is None:
            self._link = await self._open_link(relays)

    async def switch_to(self, relays: Sequence[str]) -> None:
        """Requests go through ``relays`` from now on; the old ones close once what was sent there is answered."""
        new_link = await self._open_link(relays)
        old_link, self._link = self._link, new_link
        if old_link is not None:
            task = asyncio.get_running_loop().create_task(self._retire(old_link))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    async def close(self, reason: str) -> None:
        """Unanswered requests fail with ``reason`` (SignerUnreachableError); the relays are closed. Idempotent."""
        for pending in list(self._pending.values()):
            if not pending.reply.done():
                pending.reply.set_exception(SignerUnreachableError(reason))
        for task in list(self._retiring):
            task.cancel()
        link, self._link = self._link, None
        if link is not None:
            await link.close()
        for task in list(self._retiring):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def wait_longer(self, seconds: float | None = None) -> int:
        """The person asks for more time: every request waiting for an approval (after an ``auth_url``) waits up to
        ``seconds`` (default: ``auth_timeout``) from now. Returns how many requests that was."""
        now = asyncio.get_running_loop().time()
        extra = self.auth_timeout if seconds is None else seconds
        waiting = [p for p in self._pending.values() if p.challenges and not p.reply.done()]
        for pending in waiting:
            pending.extend_to(now - pending.sent_at + extra)
        return len(waiting)

    async def call(self, method: Method, params: Sequence[str], *, timeout: float | None = None) -> Response:
        """Send one request and wait for the first reply to it (longer after an auth_url, up to one deadline: see
        the module doc). Connected first."""
        link = self._link
        if link is None:
            raise SignerUnreachableError("the remote signer connection is not open")
        request = Request(secrets.token_hex(nip46.REQUEST_ID_CHARS // 2), method.value, tuple(params))
        event = nip46.build_event(self._client_key, self.signer_pubkey, request, created_at=int(self._clock()),
                                  conversation_key=self._ck)
        loop = asyncio.get_running_loop()
        wait = self.request_timeout if timeout is None else timeout
        pending = _Pending(method.value, loop.create_future(), link.pool, loop.time(), wait)
        self._pending[request.id] = pending
        self.counts["requests"] += 1
        publish = loop.create_task(link.pool.publish(event, wait))
        publish.add_done_callback(_retrieved)  # once the reply is in, nobody reads the publish outcome
        try:
            async with asyncio.timeout_at(pending.sent_at + wait) as pending.timeout:
                waiting: set[asyncio.Future[Any]] = {pending.reply, publish}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if not pending.reply.done():
                    outcome = publish.result()
                    if not outcome.any_accepted:
                        raise SignerUnreachableError(
                            f"cannot reach the remote signer: no relay took the {method} request ({outcome.summary()})"
                        )
                reply = await pending.reply
        except TimeoutError:
            raise SignerUnreachableError(_not_answered(pending)) from None
        finally:
            self._pending.pop(request.id, None)
            if not publish.done():
                publish.cancel()
        if reply.failed:
            raise SignerRefusedError(f"the remote signer refused {method}: {_shown(reply.error or '')}")
        return reply

    def _on_event(self, url: str, event: Event) -> None:
        if event.pubkey != self.signer_pubkey:
            self.counts["dropped"] += 1
            return
        try:
            message = nip46.read_event(self._client_key, event, conversation_key=self._ck)
        except NostrError:
            self.counts["dropped"] += 1
            return
        if not isinstance(message, Response):
            self.counts["dropped"] += 1
            return
        pending = self._pending.get(message.id)
        if pending is None or pending.reply.done():
            self.counts["late_replies"] += 1  # the second signer's answer, or one for a request given up on
            return
        if message.is_auth_url:
            self._on_auth(pending, message)
            return
        self.counts["replies"] += 1
        pending.reply.set_result(message)

    def _on_auth(self, pending: _Pending, message: Response) -> None:
        url = _auth_url(message.error or "")
        if url is None:
            pending.reply.set_result(Response(message.id, None, "it asked to authenticate at an address that is "
                                                                "not a web page"))
            return
        if self.on_auth_url is None:
            pending.reply.set_result(Response(message.id, None, f"it asks you to authenticate at {url}, and nothing "
                                                                "here can show that"))
            return
        pending.challenges += 1
        pending.last_url = url
        if pending.challenges == 1:  # the one deadline: from when the request was sent, never moved by the signer
            pending.extend_to(self.auth_timeout)
        if url in pending.auth_urls:
            return  # the same challenge again (two signers, or a repeat)
        if len(pending.auth_urls) >= MAX_AUTH_URLS_SHOWN:
            self.counts["auth_urls_ignored"] += 1  # a signer that keeps sending new ones: not shown again
            return
        pending.auth_urls.add(url)
        self.counts["auth_urls"] += 1
        left = pending.sent_at + pending.allowed - asyncio.get_running_loop().time()
        call_safely(self.on_auth_url, AuthChallenge(url, pending.method, round(max(left, 0.0), 1)))

    async def _open_link(self, relays: Sequence[str]) -> _Link:
        pool = RelayPool(relays, auth_key=self._client_key, **self._client_kwargs)
        await pool.start()
        ready = asyncio.Event()
        subscription = pool.subscribe(
            [{"kinds": [nip46.KIND], "authors": [self.signer_pubkey], "#p": [self._client_key.public_key_hex],
              "limit": 0}],
            self._on_event,
            on_eose=lambda url: ready.set(),
        )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.ready_timeout):
                await ready.wait()
        return _Link(pool, subscription)

    async def _retire(self, link: _Link) -> None:
        """Close the old relays once the requests sent through them are answered (or given up on)."""
        waiting = [p.reply for p in self._pending.values() if p.pool is link.pool and not p.reply.done()]
        if waiting:
            await asyncio.wait(waiting, timeout=self.request_timeout)
        await link.close()


def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("publishing a NIP-46 request failed: %s", task.exception())


def _seconds(value: float) -> str:
    return f"{round(value, 1):g}"


def _not_answered(pending: _Pending) -> str:
    """Why a request ended at its deadline, in one line."""
    if not pending.challenges:
        return f"the remote signer did not answer {pending.method} within {_seconds(pending.allowed)}s"
    verb = _VERBS.get(pending.method, f"answer {pending.method}")
    times = "once" if pending.challenges == 1 else f"{pending.challenges} times"
    return (f"the remote signer did not {verb} within {_seconds(pending.allowed)} s: it asked for approval {times} "
            f"(last at {_shown(pending.last_url)}) and sent no answer")


def _shown(text: str) -> str:
    """A signer's words as we show them: one clean line, bounded."""
    text = one_line(text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _auth_url(text: str) -> str | None:
    """The auth_url challenge's URL if it is a web address, cleaned for a terminal (controls and bidirectional
    overrides: what is shown is what is opened); None if not."""
    url = clean_link(text)
    if not url or len(url) > MAX_AUTH_URL_CHARS or " " in url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme in ("https", "http") and parts.hostname else None
