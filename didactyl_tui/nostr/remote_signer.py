"""A remote signer (NIP-46) behind the :class:`~.signer.Signer` interface: the user's key stays in the signer.

The edge of :mod:`.nip46`: requests go out as kind 24133 events over the signer's relays (a
:class:`~.pool.RelayPool` of this object's own, authenticated with the client key when a relay asks), and
replies come back on one live subscription (:mod:`.nip46_channel`). Shaped like nostr-tools' ``BunkerSigner``
and rust-nostr's ``NostrConnect``:

* set up from a ``bunker://`` URI (:meth:`RemoteSigner.from_bunker`: ``connect`` with the secret, then
  ``get_public_key``) or from a ``nostrconnect://`` URI we show (:func:`.nip46_invitation.make_invitation`, then
  :meth:`RemoteSigner.from_nostrconnect` waits for the signer's answer carrying our secret); then the signer signs
  a check (:meth:`RemoteSigner.check_key`: never published) proving it holds the key it named, or the connection is
  refused. Later runs start from the stored :class:`~.nip46_session.RemoteSignerSession` without a new ``connect``;
* every wait is bounded: one deadline per request (``request_timeout``; ``auth_timeout`` in all once the signer sent
  an ``auth_url``, which is handed to ``on_auth_url`` for the app to show; further challenges do not extend it, the
  person can: :meth:`RemoteSigner.wait_longer`). A signer that cannot be reached raises
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
import dataclasses
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import DidactylError, Nip44Error, NostrError, SignerKeyMismatchError, SignerRefusedError
from . import nip46, nip46_uri
from .event import Event
from .keys import SecretKey, is_hex_pubkey
from .nip19 import short_npub
from .nip46 import Method, Response
from .nip46_channel import (
    DEFAULT_AUTH_TIMEOUT_S,
    DEFAULT_READY_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
    AuthCallback,
    SignerChannel,
)
from .nip46_invitation import DEFAULT_INVITATION_TIMEOUT_S, await_answer
from .nip46_session import RemoteSignerSession
from .nip46_uri import BunkerUri, NostrConnectUri
from .plaintext_cache import DEFAULT_CACHE_CHARS, DEFAULT_CACHE_ENTRIES, PlaintextCache
from .subscription import call_safely

log = logging.getLogger(__name__)

SWITCH_ON_CONNECT_TIMEOUT_S = 5.0  # the switch_relays a new connection sends (best effort)


class UserKeyUnknownError(NostrError, AttributeError):
    """No ``get_public_key`` answer yet. An AttributeError too: on Python 3.11 ``isinstance(x, Signer)`` calls
    ``hasattr`` on the protocol's members, and a signer that cannot sign yet is then simply not a Signer."""

    title = "Remote signer"


SessionCallback = Callable[[RemoteSignerSession], None]


class RemoteSigner:
    """The user's key in a NIP-46 signer, reached over its relays; a :class:`~.signer.Signer`.

    ``client_kwargs`` go to each :class:`~.relay.RelayClient` (timeouts, backoff); requests and replies travel
    through :attr:`channel` (:class:`~.nip46_channel.SignerChannel`, whose ``request_timeout`` may be changed
    between requests). ``on_session`` is called
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
        self._session = session
        self._client_key = session.client_key()
        self.channel = SignerChannel(self._client_key, session.signer_pubkey, on_auth_url=on_auth_url,
                                     request_timeout=request_timeout, auth_timeout=auth_timeout,
                                     ready_timeout=ready_timeout, clock=clock, client_kwargs=client_kwargs)
        self.on_session = on_session
        self._clock = clock
        self._cache = PlaintextCache(cache_entries, cache_chars)
        self._decrypting: dict[tuple[str, str], asyncio.Task[str]] = {}
        self._starting: asyncio.Lock | None = None
        self._closed = False
        self._logged_out = False
        #: the channel's (requests, replies, late_replies, auth_urls, auth_urls_ignored, dropped) and cache_hits
        self.counts = self.channel.counts

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
        """Connect to the signer of a ``bunker://`` URI (sending its secret), learn the user's key, check that the
        signer signs with it (:meth:`check_key`) and ask for the signer's relays. ``kwargs`` go to the constructor.
        The caller stores :attr:`session` (``on_session`` is not called before the connection checked out)."""
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
        signer_pubkey = await await_answer(uri, client_key, timeout, on_listening, client_kwargs)
        signer = cls(RemoteSignerSession.new(client_key, signer_pubkey, uri.relays), **kwargs)
        await signer._set_up(None, switch_relays)  # the signer's answer was its connect
        return signer

    async def _set_up(self, connect: Callable[[], Awaitable[None]] | None, switch_relays: bool) -> None:
        """A new connection: start, connect, learn the user's key, check the signer signs with it, take the signer's
        relays; closed on failure. Nothing is handed to ``on_session`` meanwhile: a connection that does not check
        out must never be stored."""
        on_session, self.on_session = self.on_session, None
        try:
            await self.start()
            if connect is not None:
                await connect()
            await self.get_public_key()
            await self.check_key()
            if switch_relays:
                await self._switch_relays_on_connect()
        except BaseException:
            await self.close()
            raise
        finally:
            self.on_session = on_session

    async def start(self) -> None:
        """Connect to the signer's relays and subscribe to its replies (waits at most ``ready_timeout`` for
        a relay to take the subscription; a signer that is away is no error here, its requests will say)."""
        self._check_open()
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            await self.channel.connect(self._session.relays)

    async def close(self) -> None:
        """Stop: unanswered requests fail, relays are closed. Idempotent."""
        self._closed = True
        # (a decrypt under way ends by itself: its reply fails here)
        await self.channel.close("the remote signer connection was closed")

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
        reply = await self._call(Method.CONNECT, nip46_uri.connect_params(self.signer_pubkey, secret, perms, metadata))
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
            raise SignerKeyMismatchError(f"the remote signer now signs as {short_npub(user)}, not as "
                                         f"{short_npub(known)} (the key this connection was made for)", "Remote signer")
        if known is None:
            self._set_session(dataclasses.replace(self._session, user_pubkey=user))
        return user

    async def check_key(self) -> str:
        """Ask the signer to sign a check (:func:`.nip46.key_check_event`: an ephemeral kind, a fresh nonce, never
        published) and verify it is signed, validly, by the key it named: a signer that names a key it does not hold
        (or no longer holds) raises :class:`SignerKeyMismatchError`. Marks the session ``key_checked``."""
        user = self._session.user_pubkey or await self.get_public_key()
        check = nip46.key_check_event(created_at=int(self._clock()), nonce=secrets.token_hex(16))
        try:
            reply = await self._call(Method.SIGN_EVENT, (nip46.event_template(**check),))
        except SignerRefusedError as exc:
            raise SignerRefusedError(f"checking the signer's key: {exc.message}", exc.title) from None
        try:
            nip46.check_signed_event(reply.result, pubkey=user, **check)
        except SignerKeyMismatchError:  # it read and verified: only the key differs
            raise SignerKeyMismatchError(f"the remote signer named the key {short_npub(user)} but signs with "
                                         f"{short_npub(Event.from_json(reply.result or '').pubkey)}: it does not hold "
                                         "the key it named", "Remote signer") from None
        if not self._session.key_checked:
            self._set_session(dataclasses.replace(self._session, key_checked=True))
        return user

    def wait_longer(self, seconds: float | None = None) -> int:
        """The person asks for more time: requests waiting for an approval (an ``auth_url``) wait ``seconds`` more
        from now (default: the auth timeout). How many requests that was."""
        return self.channel.wait_longer(seconds)

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
            task.add_done_callback(lambda done: self._decrypt_done(key, done))  # key: bound once in this call
        return await asyncio.shield(task)

    async def switch_relays(self, *, timeout: float | None = None) -> bool:
        """``switch_relays``: move to the signer's relays when it names others. True when they changed."""
        reply = await self._call(Method.SWITCH_RELAYS, (), timeout=timeout)
        relays = nip46_uri.parse_relay_list(reply.result)
        if relays is None or set(relays) == set(self._session.relays):
            return False
        await self.channel.switch_to(relays)
        self._set_session(dataclasses.replace(self._session, relays=relays))
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
        self._check_open()
        if not self.channel.connected:
            await self.start()
        return await self.channel.call(method, params, timeout=timeout)

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
    async def _switch_relays_on_connect(self) -> None:
        # The NIP asks a new connection to take the signer's relays at once; a signer that does not
        # answer this quickly is left on the relays it was reached on.
        try:
            await self.switch_relays(timeout=min(self.channel.request_timeout, SWITCH_ON_CONNECT_TIMEOUT_S))
        except DidactylError as exc:
            log.info("switch_relays after connect: %s", exc)

    def _set_session(self, session: RemoteSignerSession) -> None:
        self._session = session
        if self.on_session is not None:
            call_safely(self.on_session, session)


_OWN_KWARGS = frozenset({"on_auth_url", "on_session", "request_timeout", "auth_timeout", "ready_timeout",
                         "cache_entries", "cache_chars", "clock"})
_PAYLOAD_CHARS = (132, 87472)  # a NIP-44 v2 payload's length bounds
# The longest payload a nip44_decrypt request can carry (the text it decrypts to is within the bound).
_MAX_REMOTE_PAYLOAD_CHARS = nip46.payload_chars(nip46.MAX_PLAINTEXT_BYTES)


def _check_peer(peer: str) -> None:
    if not isinstance(peer, str) or not is_hex_pubkey(peer):
        raise Nip44Error("invalid public key: expected 64 hex characters")
