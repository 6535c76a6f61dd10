"""A ``nostrconnect://`` invitation: a new client key and the URI to show for it (as text and as a QR code), and
the wait for the first signer that answers it with the invitation's secret (NIP-46). The I/O edge of
:mod:`.nip46_uri`'s :class:`~.nip46_uri.NostrConnectUri`; :meth:`.remote_signer.RemoteSigner.from_nostrconnect`
uses it."""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import NostrError, SignerUnreachableError
from . import nip46, nip46_uri
from .event import Event
from .keys import SecretKey
from .nip46 import Response
from .nip46_uri import NostrConnectUri
from .pool import RelayPool
from .subscription import call_safely

DEFAULT_INVITATION_TIMEOUT_S = 300.0  # a nostrconnect:// URI waiting to be scanned
SECRET_BYTES = 16  # a nostrconnect:// secret: 32 hex characters


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
    uri = NostrConnectUri(key.public_key_hex, nip46_uri.check_relays(relays), secrets.token_hex(SECRET_BYTES),
                          tuple(p for p in nip46_uri.format_perms(perms).split(",") if p), name, url, image)
    return key, uri


async def await_answer(uri: NostrConnectUri, client_key: SecretKey, timeout: float,
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
