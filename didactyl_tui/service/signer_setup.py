"""The first run's choice of where the agent's key lives, for the TUI's dialog (the commands and ``serve`` make a key
on a first run, as before): a key made on this machine, a signer named by a pasted ``bunker://`` URI, or a phone
signer that answers a ``nostrconnect://`` invitation shown as text and a QR code.

A signer chosen here is kept as the config would name it. The connection goes to ``<data dir>/signer.json`` (0600,
as :mod:`.agent_signer` keeps it), and ``[signer] bunker`` into the config file: a ``bunker://`` URI naming the
signer that answered and its relays, without a secret. The secret is single-use and spent by then; later starts go
on from the stored connection, which :func:`.agent_signer.open_agent_signer` reuses for the signer the URI names.
(Without ``signer.json`` such a URI connects without a secret, which most signers refuse: choose again by removing
the line.) docs/remote-signer.md.

The network and the crypto run on an event loop of their own, on a thread: the UI loop only waits for the answer,
and cancelling that wait (the dialog's close key) stops the work and closes what it opened.

``didactyl signer connect`` (:func:`connect_signer`) makes a signer's connection again, the same way, when the one
kept no longer serves (a wrong key, a logout): a new connection, checked, replaces ``signer.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..agent.identity.keystore import ENV_NSEC, key_file_path
from ..agent.identity.signer_session import write_session
from ..config import Config
from ..config_file import config_path
from ..config_write import set_config_value
from ..errors import ConfigError, DidactylError, RelayError
from ..nostr.keys import SecretKey
from ..nostr.nip19 import encode_npub
from ..nostr.nip46_channel import AuthChallenge
from ..nostr.nip46_invitation import DEFAULT_INVITATION_TIMEOUT_S, make_invitation
from ..nostr.nip46_session import RemoteSignerSession
from ..nostr.nip46_uri import BunkerUri, check_relays
from ..nostr.remote_signer import RemoteSigner
from ..nostr.terminal_qr import render_qr
from .agent_signer import ENV_BUNKER, on_embedded_relay

T = TypeVar("T")

CLIENT_NAME = "didactyl"  # how a phone signer names this app in its list of connections
MAX_INVITATION_RELAYS = 3  # each one makes the QR code bigger
LISTEN_TIMEOUT_S = 15.0  # for a relay to take the invitation's subscription (then the code is shown)
STOP_TIMEOUT_S = 10.0  # for the work to close what it opened once stopped


def key_choice_needed(config: Config, data_dir: Path, env: Mapping[str, str]) -> bool:
    """A first run: no key file in the data dir, no ``$DIDACTYL_NSEC``, no remote signer named, and not attached to
    an agent elsewhere (its key is not made here). Reads the disk."""
    if env.get(ENV_NSEC, "").strip() or env.get(ENV_BUNKER, "").strip() or config.signer.bunker.strip():
        return False
    if config.attach.agent.strip():
        return False
    try:
        return not key_file_path(data_dir).exists()
    except OSError:
        return False  # the start will say what is wrong with the data dir


@dataclass(frozen=True, slots=True)
class SignerKept:
    """A signer connected and kept: what ``[signer] bunker`` says now, and whose key the agent is."""

    bunker: str  # no secret
    agent_npub: str
    config_file: Path
    config_problem: str | None = None  # the config file could not be written (the signer is used for this run)
    session_file: Path | None = None  # where the connection is kept (signer.json)


@dataclass(frozen=True, slots=True)
class PhoneInvitation:
    """What the person scans: the ``nostrconnect://`` URI and its QR code (text)."""

    uri: str
    qr: str


def invitation_relays(config: Config) -> str:
    """The relays offered for a phone signer: the configured ones (the embedded relay is on this machine only)."""
    return ", ".join(config.run_relay_urls[:MAX_INVITATION_RELAYS])


async def use_bunker(config: Config, data_dir: Path, env: Mapping[str, str], text: str, *,
                     on_auth_url: Callable[[str], None] | None = None,
                     client_options: Mapping[str, Any] | None = None) -> SignerKept:
    """Connect to the signer a pasted ``bunker://`` URI names and keep it (see the module doc). A bad URI, a signer
    that refuses or does not answer: a :class:`DidactylError` with one line that never repeats what was pasted."""
    uri = BunkerUri.parse(text)
    if on_embedded_relay(config, uri.relays):
        raise ConfigError("this signer listens on the app's own embedded relay, which runs only once the app has "
                          f"started: put the URI in [signer] bunker (or ${ENV_BUNKER}) instead", "Remote signer")
    kwargs = _signer_kwargs(config, on_auth_url, client_options)

    async def connect() -> RemoteSignerSession:
        remote = await RemoteSigner.from_bunker(uri, **kwargs)
        await remote.close()
        return remote.session

    return await _keep(config, data_dir, env, await run_off_loop(connect))


async def use_phone_signer(config: Config, data_dir: Path, env: Mapping[str, str], relays_text: str, *,
                           on_invitation: Callable[[PhoneInvitation], None], light_background: bool = False,
                           on_auth_url: Callable[[str], None] | None = None,
                           timeout: float = DEFAULT_INVITATION_TIMEOUT_S,
                           client_options: Mapping[str, Any] | None = None) -> SignerKept:
    """Show a ``nostrconnect://`` invitation on ``relays_text`` (``on_invitation``, once a relay has taken its
    subscription: a quick scan is not missed), wait at most ``timeout`` for a signer to answer it, and keep that
    signer. Cancel the call to stop waiting."""
    relays = check_relays(u for u in re.split(r"[\s,]+", relays_text) if u)
    kwargs = _signer_kwargs(config, on_auth_url, client_options)
    caller = asyncio.get_running_loop()

    async def connect() -> RemoteSignerSession:
        key, invitation = make_invitation(relays, name=CLIENT_NAME)
        uri = invitation.to_uri()
        qr = render_qr(uri, light_background=light_background)
        listening = asyncio.Event()
        waiting = asyncio.ensure_future(RemoteSigner.from_nostrconnect(
            invitation, key, timeout=timeout, on_listening=listening.set, **kwargs))
        try:
            listened = asyncio.ensure_future(listening.wait())
            await asyncio.wait([listened, waiting], timeout=LISTEN_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
            listened.cancel()
            if not listening.is_set() and not waiting.done():
                raise RelayError(f"no relay took the invitation within {LISTEN_TIMEOUT_S:g} s: check the relays "
                                 f"({', '.join(relays)})", "Remote signer")
            if listening.is_set():
                _call_on(caller, on_invitation, PhoneInvitation(uri, qr))
            remote = await waiting
        finally:
            waiting.cancel()
        await remote.close()
        return remote.session

    return await _keep(config, data_dir, env, await run_off_loop(connect))


async def connect_signer(config: Config, data_dir: Path, env: Mapping[str, str], text: str, *,
                         on_auth_url: Callable[[str], None] | None = None,
                         warn: Callable[[str], None] = lambda line: None,
                         client_options: Mapping[str, Any] | None = None) -> SignerKept:
    """``didactyl signer connect``: connect to the signer ``text`` (a ``bunker://`` URI) names, with its secret; the
    signer proves it signs with the key it names; then the connection replaces ``signer.json`` and ``[signer]
    bunker`` names the signer (no secret). Nothing is replaced when any of it fails. A signer on the app's embedded
    relay is reached: the relay is started (or told to reload) first, admitting this new connection's traffic."""
    uri = BunkerUri.parse(text)
    client_key = SecretKey.generate()
    if on_embedded_relay(config, uri.relays) and config.relays.embedded:
        await _admit_on_embedded_relay(config, data_dir, warn, [client_key.public_key_hex, uri.signer_pubkey])
    remote = await RemoteSigner.from_bunker(uri, client_key=client_key,
                                            **_signer_kwargs(config, on_auth_url, client_options))
    await remote.close()
    return await _keep(config, data_dir, env, remote.session)


async def _admit_on_embedded_relay(config: Config, data_dir: Path, warn: Callable[[str], None],
                                   writers: list[str]) -> None:
    from ..agent.identity.cache import pubkey_hex
    from ..agent.identity.signer_session import read_session
    from .runtime import dm_peers, start_embedded_relay

    try:  # the agent's key as this machine knows it (the relay keeps admitting its events)
        stored = await asyncio.to_thread(read_session, data_dir)
    except ConfigError:
        stored = None
    try:
        admin = pubkey_hex(config.admin.pubkey) if config.admin.pubkey.strip() else None
    except ValueError:
        admin = None
    options = config.relays.embedded.relay_options((stored.user_pubkey or "") if stored else "", admin,
                                                   dm_peers(config), writers)
    if await start_embedded_relay(config, data_dir, warn, options) is None:
        raise RelayError("the signer listens on the embedded relay, which cannot be started (see the warning above)",
                         "Remote signer")


def _signer_kwargs(config: Config, on_auth_url: Callable[[str], None] | None,
                   client_options: Mapping[str, Any] | None) -> dict[str, Any]:
    caller = asyncio.get_running_loop()

    def auth(challenge: AuthChallenge) -> None:  # on the work's loop: the line goes to the caller's
        if on_auth_url is not None:
            _call_on(caller, on_auth_url, f"the signer asks you to approve ({challenge.method}): open "
                                          f"{challenge.url} — waiting up to {challenge.wait_s:g} s")

    return {"request_timeout": config.signer.request_timeout_s, "auth_timeout": config.signer.auth_timeout_s,
            "on_auth_url": auth if on_auth_url is not None else None, **(client_options or {})}


def _call_on(loop: asyncio.AbstractEventLoop, callback: Callable[[Any], None], value: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody to tell
        loop.call_soon_threadsafe(callback, value)


async def _keep(config: Config, data_dir: Path, env: Mapping[str, str], session: RemoteSignerSession) -> SignerKept:
    """The connection into signer.json, ``[signer] bunker`` into the config file, and into the config in use."""
    kept = await asyncio.to_thread(_write, config, data_dir, env, session)
    config.signer.bunker = kept.bunker  # the start that follows opens this signer
    return kept


def _write(config: Config, data_dir: Path, env: Mapping[str, str], session: RemoteSignerSession) -> SignerKept:
    session_file = write_session(data_dir, session)
    bunker = BunkerUri(session.signer_pubkey, session.relays).to_uri()
    path = config.path or config_path(None, dict(env))
    problem = None
    try:
        set_config_value(path, "signer", "bunker", bunker)
    except ConfigError as exc:
        problem = (f"{exc.message}; the signer is used for this run: add bunker = \"{bunker}\" under [signer] "
                   "there, or the next start asks again")
    assert session.user_pubkey is not None  # a new connection asks for it before it is returned
    return SignerKept(bunker, encode_npub(session.user_pubkey), Path(path), problem, session_file)


async def run_off_loop(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``work()`` run on a new event loop on a thread of its own; its result or its error. Cancelling the caller
    cancels the work and waits (at most :data:`STOP_TIMEOUT_S`) for it to close what it opened."""
    caller = asyncio.get_running_loop()
    answer: asyncio.Future[T] = caller.create_future()
    handle: dict[str, Any] = {}
    stop_asked = threading.Event()

    async def main() -> T:
        handle["loop"], handle["task"] = asyncio.get_running_loop(), asyncio.current_task()
        if stop_asked.is_set():  # asked before the handle above was there to be cancelled through
            raise asyncio.CancelledError
        return await work()

    def settle(value: Any, error: BaseException | None) -> None:
        if answer.done():
            return
        if isinstance(error, asyncio.CancelledError):
            answer.cancel()
        elif error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(value)

    def run() -> None:
        try:
            value, error = asyncio.run(main()), None
        except BaseException as exc:  # handed to the caller, which raises it
            value, error = None, exc
        with contextlib.suppress(RuntimeError):
            caller.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name="didactyl-signer-setup", daemon=True).start()
    try:
        return await asyncio.shield(answer)
    except asyncio.CancelledError:
        # The work is told to stop before anything here awaits: a second cancel of the caller (a dialog closed while
        # its worker stops) could come during an await here, and the work then went on waiting for a phone.
        stop_asked.set()
        with contextlib.suppress(RuntimeError, KeyError):  # not started yet (it sees stop_asked), or already over
            handle["loop"].call_soon_threadsafe(handle["task"].cancel)
        with contextlib.suppress(asyncio.CancelledError, TimeoutError, DidactylError):
            await asyncio.wait_for(asyncio.shield(answer), STOP_TIMEOUT_S)  # it closes what it opened
        raise
