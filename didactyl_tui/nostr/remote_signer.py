"""A remote signer (NIP-46) behind the :class:`~.signer.Signer` interface: the user's key stays in the signer.

The edge of :mod:`.nip46`: requests go out as kind 24133 events over the signer's relays (a
:class:`~.pool.RelayPool` of this object's own, authenticated with the client key when a relay asks), and
replies come back on one live subscription. Shaped like nostr-tools' ``BunkerSigner`` and rust-nostr's
``NostrConnect``:

* set up from a ``bunker://`` URI (:meth:`RemoteSigner.from_bunker`: ``connect`` with the secret, then
  ``get_public_key``) or from a ``nostrconnect://`` URI we show (:func:`make_invitation`, then
  :meth:`RemoteSigner.from_nostrconnect` waits for the signer's answer carrying our secret); later runs start
  from the stored :class:`~.nip46.RemoteSignerSession` without a new ``connect``;
* every wait is bounded (``request_timeout``; ``auth_timeout`` once the signer sent an ``auth_url``, which is
  handed to ``on_auth_url`` for the app to show). A signer that cannot be reached raises
  :class:`~..errors.SignerUnreachableError` (a :class:`RelayError`: try later); one that answers with an error
  raises :class:`~..errors.SignerRefusedError` (a :class:`NostrError`);
* only the first reply to a request counts (two signers holding one key both answer); later ones are counted;
* concurrent calls are concurrent requests (a start-up load sends its decrypts together), and a decrypt
  already under way is shared, not sent twice;
* decrypted text is kept for the process in a bounded LRU keyed by (peer, payload): a payload decrypted
  before, or encrypted here, is never a round trip again;
* a text that cannot travel (over :data:`~.nip46.MAX_PLAINTEXT_BYTES`) is refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..errors import DidactylError, Nip44Error, NostrError, SignerRefusedError, SignerUnreachableError
from ..terminal_text import one_line
from . import nip46
from .event import Event
from .keys import SecretKey, is_hex_pubkey
from .nip46 import BunkerUri, Method, NostrConnectUri, RemoteSignerSession, Request, Response
from .pool import PoolSubscription, RelayPool
from .subscription import call_safely

log = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT_S = 30.0  # a signer on a phone may wait for a tap; on loopback a reply takes ~20 ms
DEFAULT_AUTH_TIMEOUT_S = 300.0  # after an auth_url: the person has to open it and approve
DEFAULT_INVITATION_TIMEOUT_S = 300.0  # a nostrconnect:// URI waiting to be scanned
DEFAULT_READY_TIMEOUT_S = 5.0  # start(): how long to wait for a relay to take our subscription
SWITCH_ON_CONNECT_TIMEOUT_S = 5.0  # the switch_relays a new connection sends (best effort)
DEFAULT_CACHE_ENTRIES = 4096
DEFAULT_CACHE_CHARS = 32 * 1024 * 1024
MAX_ERROR_CHARS = 300  # a signer's error text, as shown
MAX_AUTH_URL_CHARS = 2048
SECRET_BYTES = 16  # a nostrconnect:// secret: 32 hex characters


class UserKeyUnknownError(NostrError, AttributeError):
    """No ``get_public_key`` answer yet. An AttributeError too: on Python 3.11 ``isinstance(x, Signer)`` calls
    ``hasattr`` on the protocol's members, and a signer that cannot sign yet is then simply not a Signer."""

    title = "Remote signer"


@dataclass(frozen=True, slots=True)
class AuthChallenge:
    """The signer wants the person to open ``url`` (to log in or approve) before it answers ``method``."""

    url: str
    method: str


AuthCallback = Callable[[AuthChallenge], None]
SessionCallback = Callable[[RemoteSignerSession], None]


class PlaintextCache:
    """Decrypted text by (peer, payload), least recently used first out, bounded in entries and characters."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_ENTRIES, max_chars: int = DEFAULT_CACHE_CHARS) -> None:
        if max_entries < 0 or max_chars < 0:
            raise ValueError("cache bounds must be >= 0")
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.chars = 0
        self._items: OrderedDict[tuple[str, str], str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple[str, str]) -> str | None:
        text = self._items.get(key)
        if text is not None:
            self._items.move_to_end(key)
        return text

    def put(self, key: tuple[str, str], text: str) -> None:
        size = len(key[1]) + len(text)
        if size > self.max_chars or self.max_entries == 0:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self.chars -= len(key[1]) + len(old)
        self._items[key] = text
        self.chars += size
        while len(self._items) > self.max_entries or self.chars > self.max_chars:
            (_, payload), dropped = self._items.popitem(last=False)
            self.chars -= len(payload) + len(dropped)

    def clear(self) -> None:
        self._items.clear()
        self.chars = 0


@dataclass(eq=False)
class _Pending:
    method: str
    reply: asyncio.Future[Response]
    pool: RelayPool
    timeout: asyncio.Timeout | None = None
    auth_urls: set[str] = field(default_factory=set)


@dataclass(eq=False)
class _Link:
    """The signer's relays: a pool and the subscription that hears the replies."""

    pool: RelayPool
    subscription: PoolSubscription

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.subscription.close()
        await self.pool.close()


def make_invitation(
    relays: Iterable[str],
    *,
    perms: Iterable[str] = (),
    name: str | None = None,
    url: str | None = None,
    image: str | None = None,
    client_key: SecretKey | None = None,
) -> tuple[SecretKey, NostrConnectUri]:
    """A new client key and the ``nostrconnect://`` URI to show for it (with a fresh secret)."""
    key = client_key or SecretKey.generate()
    uri = NostrConnectUri(key.public_key_hex, nip46.check_relays(relays), secrets.token_hex(SECRET_BYTES),
                          tuple(p for p in nip46.format_perms(perms).split(",") if p), name, url, image)
    return key, uri


class RemoteSigner:
    """The user's key in a NIP-46 signer, reached over its relays; a :class:`~.signer.Signer`.

    ``client_kwargs`` go to each :class:`~.relay.RelayClient` (timeouts, backoff). ``on_session`` is called
    with the new session whenever it changes (the user key learned, the relays switched) so the app can
    store it; ``on_auth_url`` with each ``auth_url`` challenge.
    """

    def __init__(
        self,
        session: RemoteSignerSession,
        *,
        on_auth_url: AuthCallback | None = None,
        on_session: SessionCallback | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        auth_timeout: float = DEFAULT_AUTH_TIMEOUT_S,
        ready_timeout: float = DEFAULT_READY_TIMEOUT_S,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        cache_chars: int = DEFAULT_CACHE_CHARS,
        clock: Callable[[], float] = time.time,
        **client_kwargs: Any,
    ) -> None:
        if request_timeout <= 0 or auth_timeout <= 0 or ready_timeout < 0:
            raise NostrError("remote signer timeouts must be positive", "Remote signer")
        self._session = session
        self._client_key = session.client_key()
        self._ck = nip46.conversation_key(self._client_key, session.signer_pubkey)
        self.on_auth_url = on_auth_url
        self.on_session = on_session
        self.request_timeout = request_timeout
        self.auth_timeout = auth_timeout
        self.ready_timeout = ready_timeout
        self._clock = clock
        self._client_kwargs = client_kwargs
        self._cache = PlaintextCache(cache_entries, cache_chars)
        self._pending: dict[str, _Pending] = {}
        self._decrypting: dict[tuple[str, str], asyncio.Task[str]] = {}
        self._link: _Link | None = None
        self._starting: asyncio.Lock | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._logged_out = False
        #: requests sent, replies taken, late_replies (a second answer, or one nobody waits for),
        #: auth_urls, dropped (not a reply we can read), cache_hits
        self.counts: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"RemoteSigner({self._session!r}, closed={self._closed})"

    # --- set-up ---------------------------------------------------------------------------------------------
    @classmethod
    async def from_bunker(
        cls,
        uri: str | BunkerUri,
        *,
        client_key: SecretKey | None = None,
        perms: Iterable[str] = (),
        metadata: Mapping[str, str] | None = None,
        switch_relays: bool = True,
        **kwargs: Any,
    ) -> RemoteSigner:
        """Connect to the signer of a ``bunker://`` URI (sending its secret), learn the user's key, and ask
        for the signer's relays. ``kwargs`` go to the constructor. The caller stores :attr:`session`."""
        bunker = BunkerUri.parse(uri) if isinstance(uri, str) else uri
        key = client_key or SecretKey.generate()
        signer = cls(RemoteSignerSession.new(key, bunker.signer_pubkey, bunker.relays), **kwargs)
        await signer._set_up(lambda: signer.connect(bunker.secret, perms=perms, metadata=metadata), switch_relays)
        return signer

    @classmethod
    async def from_nostrconnect(
        cls,
        uri: NostrConnectUri,
        client_key: SecretKey,
        *,
        timeout: float = DEFAULT_INVITATION_TIMEOUT_S,
        on_listening: Callable[[], None] | None = None,
        switch_relays: bool = True,
        **kwargs: Any,
    ) -> RemoteSigner:
        """Wait (at most ``timeout``) for a signer to answer the ``nostrconnect://`` invitation ``uri`` with its
        secret, then learn the user's key. Answers that do not carry the secret are ignored. ``on_listening``
        runs once a relay has taken our subscription: show the URI then, and a quick scan is not missed."""
        if client_key.public_key_hex != uri.client_pubkey:
            raise NostrError("the nostrconnect:// URI was made for another client key", "Remote signer")
        client_kwargs = {k: v for k, v in kwargs.items() if k not in _OWN_KWARGS}
        signer_pubkey = await _await_answer(uri, client_key, timeout, on_listening, client_kwargs)
        signer = cls(RemoteSignerSession.new(client_key, signer_pubkey, uri.relays), **kwargs)
        await signer._set_up(None, switch_relays)  # the signer's answer was its connect
        return signer

    async def _set_up(self, connect: Callable[[], Awaitable[None]] | None, switch_relays: bool) -> None:
        """A new connection: start, connect, learn the user's key, take the signer's relays; closed on failure."""
        try:
            await self.start()
            if connect is not None:
                await connect()
            await self.get_public_key()
            if switch_relays:
                await self._switch_relays_on_connect()
        except BaseException:
            await self.close()
            raise

    async def start(self) -> None:
        """Connect to the signer's relays and subscribe to its replies (waits at most ``ready_timeout`` for
        a relay to take the subscription; a signer that is away is no error here, its requests will say)."""
        self._check_open()
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._link is None:
                self._link = await self._open_link(self._session.relays)

    async def close(self) -> None:
        """Stop: unanswered requests fail, relays are closed. Idempotent."""
        self._closed = True
        for pending in list(self._pending.values()):
            if not pending.reply.done():
                pending.reply.set_exception(SignerUnreachableError("the remote signer connection was closed"))
        for task in list(self._background):
            task.cancel()  # (a decrypt under way ends by itself: its reply just failed, above)
        link, self._link = self._link, None
        if link is not None:
            await link.close()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def __aenter__(self) -> RemoteSigner:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- what the app reads -----------------------------------------------------------------------------------
    @property
    def session(self) -> RemoteSignerSession:
        """The current session (store it 0600 when :attr:`on_session` fires)."""
        return self._session

    @property
    def public_key(self) -> str:
        """The user's key (what events are signed with), as the signer told it."""
        if self._session.user_pubkey is None:
            raise UserKeyUnknownError("the remote signer has not told us the user's key yet (connect first)")
        return self._session.user_pubkey

    @property
    def signer_pubkey(self) -> str:
        """The signer's transport key (may differ from :attr:`public_key`)."""
        return self._session.signer_pubkey

    @property
    def client_pubkey(self) -> str:
        return self._client_key.public_key_hex

    @property
    def relays(self) -> tuple[str, ...]:
        return self._session.relays

    @property
    def cache(self) -> PlaintextCache:
        return self._cache

    @property
    def closed(self) -> bool:
        return self._closed

    # --- NIP-46 methods ---------------------------------------------------------------------------------------
    async def connect(self, secret: str | None = None, *, perms: Iterable[str] = (),
                      metadata: Mapping[str, str] | None = None) -> None:
        """``connect``: introduce the client key (with the bunker's single-use secret)."""
        reply = await self._call(Method.CONNECT, nip46.connect_params(self.signer_pubkey, secret, perms, metadata))
        result = reply.result or ""
        if result != nip46.ACK and not (secret and hmac.compare_digest(result.encode(), secret.encode())):
            raise SignerRefusedError("the remote signer answered connect with neither 'ack' nor our secret")

    async def get_public_key(self) -> str:
        """``get_public_key``: the user's key, remembered in the session."""
        reply = await self._call(Method.GET_PUBLIC_KEY, ())
        user = reply.result or ""
        if not is_hex_pubkey(user):
            raise NostrError("the remote signer's answer to get_public_key is not a public key", "Remote signer")
        user = user.lower()
        known = self._session.user_pubkey
        if known is not None and known != user:
            raise NostrError(f"the remote signer now signs as {user[:12]}…, not as {known[:12]}… (the key this "
                             "session was made for)", "Remote signer")
        if known is None:
            self._set_session(dataclasses.replace(self._session, user_pubkey=user))
        return user

    async def ping(self) -> None:
        reply = await self._call(Method.PING, ())
        if reply.result != nip46.PONG:
            raise NostrError("the remote signer answered ping with something other than 'pong'", "Remote signer")

    async def sign_event(self, *, kind: int, content: str, created_at: int,
                         tags: Sequence[Sequence[str]]) -> Event:
        """``sign_event``; the signed event is checked (signature, the user's key, exactly what we asked)."""
        user = self._session.user_pubkey or await self.get_public_key()
        template = nip46.event_template(kind=kind, content=content, created_at=created_at, tags=tags)
        reply = await self._call(Method.SIGN_EVENT, (template,))
        return nip46.check_signed_event(reply.result, pubkey=user, kind=kind, content=content,
                                        created_at=created_at, tags=tags)

    async def nip44_encrypt(self, peer: str, plaintext: str) -> str:
        """``nip44_encrypt``; a text over the size bound is refused before anything is sent."""
        _check_peer(peer)
        nip46.check_plaintext(plaintext)
        reply = await self._call(Method.NIP44_ENCRYPT, (peer, plaintext))
        payload = reply.result
        if not isinstance(payload, str) or not _PAYLOAD_CHARS[0] <= len(payload) <= _PAYLOAD_CHARS[1]:
            raise NostrError("the remote signer's answer to nip44_encrypt is not a NIP-44 payload", "Remote signer")
        self._cache.put((peer, payload), plaintext)  # reading our own save back costs nothing
        return payload

    async def nip44_decrypt(self, peer: str, payload: str) -> str:
        """``nip44_decrypt``, from the cache when this payload was decrypted (or encrypted) before."""
        _check_peer(peer)
        if not isinstance(payload, str):
            raise Nip44Error("payload must be a string")
        key = (peer, payload)
        text = self._cache.get(key)
        if text is not None:
            self.counts["cache_hits"] += 1
            return text
        task = self._decrypting.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._decrypt(peer, payload))
            self._decrypting[key] = task
            task.add_done_callback(lambda t, key=key: self._decrypt_done(key, t))
        return await asyncio.shield(task)

    async def switch_relays(self, *, timeout: float | None = None) -> bool:
        """``switch_relays``: move to the signer's relays when it names others. True when they changed."""
        reply = await self._call(Method.SWITCH_RELAYS, (), timeout=timeout)
        relays = nip46.parse_relay_list(reply.result)
        if relays is None or set(relays) == set(self._session.relays):
            return False
        new_link = await self._open_link(relays)
        old_link, self._link = self._link, new_link
        self._set_session(dataclasses.replace(self._session, relays=relays))
        if old_link is not None:
            self._spawn(self._retire(old_link))
        log.info("remote signer moved to %d relay(s)", len(relays))
        return True

    async def logout(self) -> None:
        """``logout``: end the session at the signer, then close. The session is over here whatever the signer
        answers: the app deletes the stored session (and its client key)."""
        try:
            reply = await self._call(Method.LOGOUT, ())
            if reply.result != nip46.ACK:
                raise NostrError("the remote signer answered logout with something other than 'ack'",
                                 "Remote signer")
        finally:
            self._logged_out = True
            await self.close()

    # --- requests ---------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._logged_out:
            raise NostrError("logged out of the remote signer: connect again", "Remote signer")
        if self._closed:
            raise NostrError("this remote signer connection was closed", "Remote signer")

    async def _call(self, method: Method, params: Sequence[str], *, timeout: float | None = None) -> Response:
        """Send one request and wait for the first reply to it (longer after an auth_url)."""
        self._check_open()
        if self._link is None:
            await self.start()
        link = self._link
        assert link is not None
        request = Request(secrets.token_hex(nip46.REQUEST_ID_CHARS // 2), method.value, tuple(params))
        event = nip46.build_event(self._client_key, self.signer_pubkey, request, created_at=int(self._clock()),
                                  conversation_key=self._ck)
        loop = asyncio.get_running_loop()
        pending = _Pending(method.value, loop.create_future(), link.pool)
        self._pending[request.id] = pending
        self.counts["requests"] += 1
        wait = self.request_timeout if timeout is None else timeout
        publish = loop.create_task(link.pool.publish(event, wait))
        publish.add_done_callback(_retrieved)  # once the reply is in, nobody reads the publish outcome
        try:
            async with asyncio.timeout(wait) as pending.timeout:
                await asyncio.wait({pending.reply, publish}, return_when=asyncio.FIRST_COMPLETED)
                if not pending.reply.done():
                    outcome = publish.result()
                    if not outcome.any_accepted:
                        raise SignerUnreachableError(
                            f"cannot reach the remote signer: no relay took the {method} request ({outcome.summary()})"
                        )
                reply = await pending.reply
        except TimeoutError:
            waited = "after its auth_url" if pending.auth_urls else f"within {wait:g}s"
            raise SignerUnreachableError(f"the remote signer did not answer {method} {waited}") from None
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
        if url in pending.auth_urls:
            return  # the same challenge again (two signers, or a repeat)
        if self.on_auth_url is None:
            pending.reply.set_result(Response(message.id, None, f"it asks you to authenticate at {url}, and nothing "
                                                                "here can show that"))
            return
        pending.auth_urls.add(url)
        self.counts["auth_urls"] += 1
        if pending.timeout is not None:
            pending.timeout.reschedule(asyncio.get_running_loop().time() + self.auth_timeout)
        call_safely(self.on_auth_url, AuthChallenge(url, pending.method))

    async def _decrypt(self, peer: str, payload: str) -> str:
        if len(payload) > _MAX_REMOTE_PAYLOAD_CHARS:
            raise NostrError(
                f"this NIP-44 payload is {len(payload):,} characters: through a remote signer (NIP-46) it can be at "
                f"most {_MAX_REMOTE_PAYLOAD_CHARS:,} (a text of {nip46.MAX_PLAINTEXT_BYTES:,} bytes)", "Remote signer"
            )
        reply = await self._call(Method.NIP44_DECRYPT, (peer, payload))
        if not reply.result:
            raise NostrError("the remote signer answered nip44_decrypt with nothing", "Remote signer")
        self._cache.put((peer, payload), reply.result)
        return reply.result

    def _decrypt_done(self, key: tuple[str, str], task: asyncio.Task[str]) -> None:
        if self._decrypting.get(key) is task:
            del self._decrypting[key]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter got it through the shield

    # --- relays -----------------------------------------------------------------------------------------------
    async def _open_link(self, relays: Sequence[str]) -> _Link:
        pool = RelayPool(relays, auth_key=self._client_key, **self._client_kwargs)
        await pool.start()
        ready = asyncio.Event()
        subscription = pool.subscribe(
            [{"kinds": [nip46.KIND], "authors": [self.signer_pubkey], "#p": [self.client_pubkey], "limit": 0}],
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

    async def _switch_relays_on_connect(self) -> None:
        # The NIP asks a new connection to take the signer's relays at once; a signer that does not
        # answer this quickly is left on the relays it was reached on.
        try:
            await self.switch_relays(timeout=min(self.request_timeout, SWITCH_ON_CONNECT_TIMEOUT_S))
        except DidactylError as exc:
            log.info("switch_relays after connect: %s", exc)

    def _set_session(self, session: RemoteSignerSession) -> None:
        self._session = session
        if self.on_session is not None:
            call_safely(self.on_session, session)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


_OWN_KWARGS = frozenset({"on_auth_url", "on_session", "request_timeout", "auth_timeout", "ready_timeout",
                         "cache_entries", "cache_chars", "clock"})
_PAYLOAD_CHARS = (132, 87472)  # a NIP-44 v2 payload's length bounds
# The longest payload a nip44_decrypt request can carry (the text it decrypts to is within the bound).
_MAX_REMOTE_PAYLOAD_CHARS = nip46.payload_chars(nip46.MAX_PLAINTEXT_BYTES)


async def _await_answer(uri: NostrConnectUri, client_key: SecretKey, timeout: float,
                        on_listening: Callable[[], None] | None, client_kwargs: Mapping[str, Any]) -> str:
    """The key of the first signer that answers ``uri`` with its secret."""
    loop = asyncio.get_running_loop()
    found: asyncio.Future[str] = loop.create_future()
    secret = uri.secret.encode()
    keys: dict[str, bytes] = {}  # conversation key per answering key (bounded below)

    def on_event(url: str, event: Event) -> None:
        if found.done():
            return
        try:
            ck = keys.get(event.pubkey)
            if ck is None:
                if len(keys) >= 256:
                    keys.clear()
                ck = keys[event.pubkey] = nip46.conversation_key(client_key, event.pubkey)
            message = nip46.read_event(client_key, event, conversation_key=ck)
        except NostrError:
            return
        if isinstance(message, Response) and message.result and hmac.compare_digest(message.result.encode(), secret):
            found.set_result(event.pubkey)

    pool = RelayPool(uri.relays, auth_key=client_key, **client_kwargs)
    await pool.start()
    try:
        listening: list[str] = []

        def on_eose(url: str) -> None:
            if not listening and on_listening is not None:
                call_safely(on_listening)
            listening.append(url)

        pool.subscribe([{"kinds": [nip46.KIND], "#p": [client_key.public_key_hex], "limit": 0}], on_event,
                       on_eose=on_eose)
        try:
            async with asyncio.timeout(timeout):
                return await found
        except TimeoutError:
            raise SignerUnreachableError(
                f"no signer answered the nostrconnect:// invitation within {timeout:g}s"
            ) from None
    finally:
        await pool.close()


def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("publishing a NIP-46 request failed: %s", task.exception())


def _check_peer(peer: str) -> None:
    if not isinstance(peer, str) or not is_hex_pubkey(peer):
        raise Nip44Error("invalid public key: expected 64 hex characters")


def _shown(text: str) -> str:
    """A signer's words as we show them: one clean line, bounded."""
    text = one_line(text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _auth_url(text: str) -> str | None:
    """The auth_url challenge's URL if it is a web address, cleaned for a terminal; None if not."""
    url = one_line(text)
    if not url or len(url) > MAX_AUTH_URL_CHARS or " " in url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme in ("https", "http") and parts.hostname else None
