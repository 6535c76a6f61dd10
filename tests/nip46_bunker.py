"""A scripted NIP-46 signer ("bunker") for tests: it answers kind 24133 requests over real relays.

It holds the user's key in a :class:`LocalSigner` and, optionally, a separate transport key (the signer's key
in the ``bunker://`` URI). Behaviour a test can ask for:

* ``secret`` — ``connect`` must carry it the first time (it is single-use);
* ``auth_url`` — the next requests get an ``auth_url`` challenge first, and their answer only after
  :meth:`ScriptedBunker.approve` (``auth_methods`` limits which methods are challenged);
* ``rechallenge_every`` — with ``auth_url``: a hostile signer that never answers, but sends a new ``auth_url``
  (``<auth_url>?n=<i>``) for the same request every so many seconds, after a first burst of ``rechallenge_burst``;
* ``names_key`` — what ``get_public_key`` answers (default: the key it signs with; another: a signer that names a
  key it does not hold);
* ``answers`` — how many times each request is answered (2: a second, wrong answer follows the right one);
* ``silent`` — read requests, answer none;
* ``hold_until`` — keep requests until this many are waiting, then answer them all (proves they were sent
  together: requests sent one after another would each wait for the previous answer forever);
* ``switch_to`` — the relays ``switch_relays`` names (None: no change);
* ``refuse`` — methods answered with this error text;
* ``accept(uri)`` — answer a ``nostrconnect://`` invitation, as a phone signer that scanned it would.

Everything it received is in ``received`` (requests, in order); ``connected`` holds the client keys it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Iterable
from typing import Any

from relay_servers import fast_client_kwargs

from didactyl_tui.errors import NostrError
from didactyl_tui.nostr import nip46, nip46_uri
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip46 import Method, Request, Response
from didactyl_tui.nostr.nip46_uri import NostrConnectUri
from didactyl_tui.nostr.pool import PoolSubscription, RelayPool
from didactyl_tui.nostr.signer import LocalSigner


class ScriptedBunker:
    def __init__(
        self,
        relays: Iterable[str],
        user_key: SecretKey,
        *,
        signer_key: SecretKey | None = None,
        secret: str | None = None,
        auth_url: str | None = None,
        auth_methods: Iterable[str] | None = None,
        answers: int = 1,
        silent: bool = False,
        hold_until: int | None = None,
        switch_to: list[str] | None = None,
        connect_result: str = nip46.ACK,
        refuse: dict[str, str] | None = None,
        rechallenge_every: float | None = None,
        rechallenge_burst: int = 1,
        names_key: str | None = None,
    ) -> None:
        self.relays = list(relays)
        self.user = LocalSigner(user_key)
        self.key = signer_key or user_key
        self.secret = secret
        self.auth_url = auth_url
        self.auth_methods = set(auth_methods) if auth_methods is not None else None
        self.answers = answers
        self.silent = silent
        self.hold_until = hold_until
        self.switch_to = switch_to
        self.connect_result = connect_result
        self.refuse = dict(refuse or {})
        self.rechallenge_every = rechallenge_every
        self.rechallenge_burst = rechallenge_burst
        self.names_key = names_key
        self.challenges_sent = 0
        self.connected: set[str] = set()
        self.received: list[Request] = []
        self.sent: list[Response] = []
        self.waiting_auth: list[tuple[str, Request]] = []
        self._held: list[tuple[str, Request]] = []
        self._secret_used = False
        self._pool: RelayPool | None = None
        self._sub: PoolSubscription | None = None
        self._ready = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def pubkey(self) -> str:
        """The signer's transport key (the one in the bunker:// URI)."""
        return self.key.public_key_hex

    def bunker_uri(self, relays: Iterable[str] | None = None) -> str:
        return nip46_uri.BunkerUri(self.pubkey, tuple(relays or self.relays), self.secret).to_uri()

    def methods(self) -> list[str]:
        return [r.method for r in self.received]

    # --- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._pool = RelayPool(self.relays, **fast_client_kwargs())
        await self._pool.start()
        self._sub = self._pool.subscribe([{"kinds": [nip46.KIND], "#p": [self.pubkey], "limit": 0}],
                                         self._on_event, on_eose=lambda url: self._ready.set())
        async with asyncio.timeout(10):
            await self._ready.wait()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def __aenter__(self) -> ScriptedBunker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- what a test does -------------------------------------------------------------------------------------
    async def approve(self) -> None:
        """The person opened the auth_url and approved: answer what was waiting for it."""
        waiting, self.waiting_auth = self.waiting_auth, []
        self.auth_url = None
        for client, request in waiting:
            await self._answer(client, request)

    async def accept(self, uri_text: str) -> None:
        """Answer a nostrconnect:// invitation: the connect response carrying its secret."""
        uri = NostrConnectUri.parse(uri_text)
        self.connected.add(uri.client_pubkey)
        await self._send(uri.client_pubkey, Response(secrets.token_hex(4), uri.secret))

    # --- serving ----------------------------------------------------------------------------------------------
    def _on_event(self, url: str, event: Event) -> None:
        try:
            message = nip46.read_event(self.key, event)
        except NostrError:
            return
        if not isinstance(message, Request):
            return
        self.received.append(message)
        if self.silent:
            return
        task = asyncio.get_running_loop().create_task(self._handle(event.pubkey, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, client: str, request: Request) -> None:
        if self.hold_until is not None:
            self._held.append((client, request))
            if len(self._held) < self.hold_until:
                return
            held, self._held = self._held, []
            for c, r in held:
                await self._answer(c, r)
            return
        if self.auth_url is not None and (self.auth_methods is None or request.method in self.auth_methods):
            if self.rechallenge_every is not None:
                await self._challenge_for_ever(client, request, self.auth_url, self.rechallenge_every)
                return
            self.waiting_auth.append((client, request))
            self.challenges_sent += 1
            await self._send(client, Response(request.id, nip46.AUTH_URL, self.auth_url))
            return
        await self._answer(client, request)

    async def _challenge_for_ever(self, client: str, request: Request, url: str, every: float) -> None:
        """Never answer: a new auth_url for this request now (a burst), then every ``every`` seconds (until stopped)."""
        n = 0
        while True:
            for _ in range(self.rechallenge_burst if n == 0 else 1):
                n += 1
                self.challenges_sent += 1
                await self._send(client, Response(request.id, nip46.AUTH_URL, f"{url}?n={n}"))
            await asyncio.sleep(every)

    async def _answer(self, client: str, request: Request) -> None:
        try:
            result = self._result(client, request)
            response = Response(request.id, result)
        except NostrError as exc:
            response = Response(request.id, "", str(exc))
        await self._send(client, response)
        for _ in range(self.answers - 1):
            await self._send(client, Response(request.id, "", "a second answer that must be ignored"))
        if request.method == Method.LOGOUT and not response.error:
            self.connected.discard(client)

    def _result(self, client: str, request: Request) -> str | None:
        method, params = request.method, request.params
        if method in self.refuse:
            raise NostrError(self.refuse[method])
        if method == Method.CONNECT:
            if not params or params[0] != self.pubkey:
                raise NostrError("invalid target pubkey")
            if client not in self.connected and self.secret is not None:
                given = params[1] if len(params) > 1 else ""
                if self._secret_used or given != self.secret:
                    raise NostrError("invalid connection secret")
                self._secret_used = True
            self.connected.add(client)
            return self.connect_result
        if client not in self.connected:
            raise NostrError("unauthorized: connect first")
        if method == Method.GET_PUBLIC_KEY:
            return self.names_key or self.user.public_key
        if method == Method.PING:
            return nip46.PONG
        if method == Method.SIGN_EVENT:
            return self.user.sign_now(**nip46.read_template(params[0])).to_json()
        if method == Method.NIP44_ENCRYPT:
            return self.user.encrypt_now(params[0], params[1])
        if method == Method.NIP44_DECRYPT:
            return self.user.decrypt_now(params[0], params[1])
        if method == Method.SWITCH_RELAYS:
            return json.dumps(self.switch_to) if self.switch_to is not None else None
        if method == Method.LOGOUT:
            return nip46.ACK
        raise NostrError(f"unsupported method {method}")

    async def _send(self, client: str, response: Response) -> None:
        assert self._pool is not None
        event = nip46.build_event(self.key, client, response, created_at=int(time.time()))
        self.sent.append(response)
        with contextlib.suppress(Exception):
            await self._pool.publish(event, 5.0)


@contextlib.asynccontextmanager
async def bunker_and_signer(
    relay_url: str,
    user_key: SecretKey,
    *,
    signer_kwargs: dict[str, Any] | None = None,
    **bunker_kwargs: Any,
) -> Any:
    """A :class:`ScriptedBunker` on ``relay_url`` and a :class:`RemoteSigner` connected to it via its bunker:// URI
    (with its secret). Yields ``(bunker, signer)``; both are stopped after. An ``auth_url`` challenges, and
    ``refuse`` refuses, the requests made once connected (the connection's own, its key check included, are
    answered)."""
    from didactyl_tui.nostr.remote_signer import RemoteSigner

    bunker_kwargs.setdefault("secret", secrets.token_hex(8))
    auth_url, refuse = bunker_kwargs.pop("auth_url", None), bunker_kwargs.pop("refuse", None)
    kwargs: dict[str, Any] = {"request_timeout": 10.0, **fast_client_kwargs(), **(signer_kwargs or {})}
    async with ScriptedBunker([relay_url], user_key, **bunker_kwargs) as bunker:
        signer = await RemoteSigner.from_bunker(bunker.bunker_uri(), **kwargs)
        bunker.auth_url, bunker.refuse = auth_url, dict(refuse or {})
        try:
            yield bunker, signer
        finally:
            await signer.close()
