"""The agent's key as the service holds it: a :class:`~didactyl_tui.nostr.signer.Signer`.

Either the key in hand (``$DIDACTYL_NSEC`` or ``<data dir>/agent.key``, created on first run: the default) or a
NIP-46 remote signer named by ``[signer] bunker`` (``$DIDACTYL_BUNKER``, ``--bunker``): then no key file is read or
created here. The first run connects with the ``bunker://`` URI's secret, has the signer prove it signs with the key it
named (a connection that does not is refused and nothing is kept), and keeps the connection in ``signer.json``
(0600); later runs start from it without a new ``connect`` and without waiting for the signer (one that is away
makes its requests fail, not the start), and check in the background, once it answers, that it still signs with the
key the connection was made for (:func:`check_stored_key`): a wrong key is said with the command that reconnects.
docs/remote-signer.md.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.identity.keystore import ENV_NSEC, key_file_path, load_agent_key
from ..agent.identity.signer_cache import CACHE_FILE_NAME, CachedSigner, SignerCache, WatchedSigner
from ..agent.identity.signer_session import SESSION_FILE_NAME, read_session, session_path, write_session
from ..config import Config
from ..errors import ConfigError, DidactylError, SignerKeyMismatchError, SignerUnreachableError
from ..nostr.keys import SecretKey
from ..nostr.nip46 import MAX_PLAINTEXT_BYTES
from ..nostr.nip46_channel import AuthChallenge
from ..nostr.nip46_session import RemoteSignerSession
from ..nostr.nip46_uri import BunkerUri
from ..nostr.remote_signer import RemoteSigner
from ..nostr.signer import LocalSigner, Signer

log = logging.getLogger("didactyl.service")

ENV_BUNKER = "DIDACTYL_BUNKER"
RECONNECT_COMMAND = "didactyl signer connect"  # cli/signer.py: a new connection, checked, replacing signer.json
WRONG_KEY_HELP = (f"nothing can be signed until the signer is connected again: {RECONNECT_COMMAND} (with a new "
                  "bunker:// URI from your signer)")


@dataclass(frozen=True, slots=True)
class AgentSigner:
    """The agent's signer; ``key`` and ``key_path`` only when the key is in hand, ``remote`` only when it is not."""

    signer: Signer
    key: SecretKey | None
    key_path: Path | None
    remote: RemoteSigner | None
    cache: SignerCache | None = None  # with a remote signer: what it decrypted for the agent, kept here
    watch: WatchedSigner | None = None  # with a remote signer: whether it answers
    stored: bool = False  # with a remote signer: started from signer.json (its key is checked once it answers)
    created: bool = False  # the key file was made on this start (the person is told where, and how to back it up)

    @property
    def public_key(self) -> str:
        return self.signer.public_key

    async def close(self) -> None:
        if self.remote is not None:
            await self.remote.close()
        if self.cache is not None:
            await asyncio.to_thread(self.cache.close)


async def open_agent_signer(config: Config, data_dir: Path, env: Mapping[str, str], *,
                            on_auth_url: Callable[[AuthChallenge], None] | None = None,
                            on_reachable: Callable[[bool], None] | None = None,
                            client_options: Mapping[str, Any] | None = None,
                            client_key: SecretKey | None = None) -> AgentSigner:
    """The signer the config names (see the module doc). Raises a :class:`ConfigError` (or a Nostr or relay error
    from the first ``connect``) with one readable line."""
    bunker = config.signer.bunker.strip()
    if not bunker:
        loaded = await asyncio.to_thread(load_agent_key, data_dir, env)
        return AgentSigner(LocalSigner(loaded.key), loaded.key, loaded.path, None, created=loaded.source == "created")
    if env.get(ENV_NSEC, "").strip():
        raise ConfigError(f"${ENV_NSEC} and a remote signer ([signer] bunker or ${ENV_BUNKER}) are both set: the "
                          "agent's key is in one place; unset one", "Remote signer")
    remote, stored = await _open_bunker(bunker, data_dir, config, what="[signer] bunker", on_auth_url=on_auth_url,
                                        client_options=client_options, client_key=client_key)
    watched = WatchedSigner(remote, remote.ping, on_reachable or (lambda reachable: None),
                            ping_interval_s=config.signer.ping_interval_s, wrong_key_help=WRONG_KEY_HELP)
    try:
        cache = await asyncio.to_thread(SignerCache, Path(data_dir) / CACHE_FILE_NAME)
    except (OSError, sqlite3.Error) as exc:  # no cache: every read asks the signer, as without one
        log.warning("the remote signer's cache cannot be opened (%s): every read asks the signer", exc)
        return AgentSigner(watched, None, None, remote, watch=watched, stored=stored)
    # The cache in front: a version read from it is no request, and says nothing about the signer's state.
    return AgentSigner(CachedSigner(watched, cache), None, None, remote, cache, watched, stored)


async def check_stored_key(remote: RemoteSigner, *, retry_s: float, warn: Callable[[str], None]) -> bool | None:
    """Whether the signer a stored connection reaches still signs with the key the connection was made for (a
    background task from the start: the start never waits for the signer). A connection kept from before the key
    check was made gets it now (one signature, never published); a checked one is asked for its key. A signer that
    is away is asked again every ``retry_s``. A wrong key is said through ``warn``, with the command that
    reconnects (False); a check that cannot be made (refused) is logged (None)."""
    while True:
        try:
            await remote.get_public_key()  # the key it names now: the one this connection was made for?
            if not remote.session.key_checked:
                await remote.check_key()  # and it signs with it (then stored as checked, through on_session)
            return True
        except SignerUnreachableError:
            await asyncio.sleep(retry_s)
        except SignerKeyMismatchError as exc:
            warn(f"{exc.message}: {WRONG_KEY_HELP}")
            return False
        except DidactylError as exc:
            log.info("the remote signer's key could not be checked: %s", exc.message)
            return None


async def connect_bunker(bunker: str, data_dir: Path, config: Config, *, what: str,
                         session_name: str = SESSION_FILE_NAME,
                         on_auth_url: Callable[[AuthChallenge], None] | None = None,
                         client_options: Mapping[str, Any] | None = None,
                         client_key: SecretKey | None = None) -> RemoteSigner:
    """A :class:`RemoteSigner` for the ``bunker://`` URI ``bunker`` (``what`` names its config key in errors): from
    the session kept in ``session_name`` when it is this signer's (no new ``connect``), else connecting with the
    URI's secret (the signer proving it signs with the key it named) and keeping the new session before anything is
    signed. ``[signer]``'s timeouts apply."""
    remote, _stored = await _open_bunker(bunker, data_dir, config, what=what, session_name=session_name,
                                         on_auth_url=on_auth_url, client_options=client_options,
                                         client_key=client_key)
    return remote


async def _open_bunker(bunker: str, data_dir: Path, config: Config, *, what: str,
                       session_name: str = SESSION_FILE_NAME,
                       on_auth_url: Callable[[AuthChallenge], None] | None = None,
                       client_options: Mapping[str, Any] | None = None,
                       client_key: SecretKey | None = None) -> tuple[RemoteSigner, bool]:
    """:func:`connect_bunker`, and whether it started from the stored session."""
    try:
        uri = BunkerUri.parse(bunker)
    except DidactylError as exc:
        raise ConfigError(f"{what}: {exc.message}", "Remote signer") from None
    stored = await asyncio.to_thread(read_session, data_dir, session_name)
    loop = asyncio.get_running_loop()
    latest: list[RemoteSignerSession] = []
    writing = threading.Lock()

    def write_latest() -> None:
        """The newest session, whatever order the writes run in (one at a time)."""
        with writing:
            try:
                write_session(data_dir, latest[-1], session_name)
            except ConfigError as exc:
                log.warning("%s", exc.message)

    def keep(session: RemoteSignerSession) -> None:
        """A new session (the relays switched, the user key learned): stored off the loop."""
        latest.append(session)
        del latest[:-1]
        loop.run_in_executor(None, write_latest)

    kwargs: dict[str, Any] = {"request_timeout": config.signer.request_timeout_s,
                              "auth_timeout": config.signer.auth_timeout_s, "on_auth_url": on_auth_url,
                              "on_session": keep, **(client_options or {})}
    if stored is not None and stored.signer_pubkey == uri.signer_pubkey and stored.user_pubkey:
        remote = RemoteSigner(stored, **kwargs)
        await remote.start()  # a signer that is away is no error here: its requests will say so
        return remote, True
    if stored is not None:
        log.info("%s is for another signer: connecting to the one %s names", session_path(data_dir, session_name),
                 what)
    try:
        remote = await RemoteSigner.from_bunker(uri, client_key=client_key, **kwargs)
    except SignerKeyMismatchError as exc:
        raise SignerKeyMismatchError(f"{exc.message}: the connection to the signer {what} names is refused and "
                                     f"nothing was kept (ask the signer for a bunker:// URI of the right key)",
                                     exc.title) from None
    latest.append(remote.session)
    del latest[:-1]
    await asyncio.to_thread(write_latest)  # stored before anything is signed: the secret cannot be used again
    return remote, False


def known_agent_pubkey(config: Config, data_dir: Path, env: Mapping[str, str]) -> str | None:
    """The agent's public key as this machine knows it without asking anyone (no key is created, no signer is
    reached): the stored remote signer session's, or the key in hand's; None when there is none yet."""
    if config.signer.bunker.strip():
        session = read_session(data_dir)
        return session.user_pubkey if session is not None else None
    if not env.get(ENV_NSEC, "").strip() and not key_file_path(data_dir).exists():
        return None
    return load_agent_key(data_dir, env, create=False).key.public_key_hex


def remote_signer_bound(config: Config) -> dict[str, Any]:
    """The memories' byte bound when the key is in a remote signer (NIP-44 inside NIP-44: about 40,960 bytes of
    text travel), for the codecs; nothing when the key is in hand."""
    if not config.signer.bunker.strip():
        return {}
    return {"memory_max_bytes": MAX_PLAINTEXT_BYTES, "memory_bytes_bound": "a remote signer (NIP-46)"}


@dataclass(frozen=True, slots=True)
class SignerPlan:
    """What is known of a remote signer before connecting: the keys its requests and replies are signed with (this
    app's client key, made now on a first run, and the signer's), whether it listens on the embedded relay, and the
    agent's key if a stored session knows it."""

    client_key: SecretKey | None  # a new one for a first connect (None: the stored session's is used)
    writers: list[str]
    uses_embedded_relay: bool
    agent_pubkey: str | None


def plan_signer(config: Config, data_dir: Path) -> SignerPlan | None:
    """None when the key is in hand. The embedded relay admits the signer's traffic (kind 24133 between the two
    keys) when the bunker's relays include it: it is then started before the signer is reached."""
    bunker = config.signer.bunker.strip()
    if not bunker:
        return None
    try:
        uri = BunkerUri.parse(bunker)
    except DidactylError:
        return None  # open_agent_signer says what is wrong
    stored = read_session(data_dir)
    reused = stored is not None and stored.signer_pubkey == uri.signer_pubkey and stored.user_pubkey
    client = None if reused else SecretKey.generate()
    client_pubkey = stored.client_pubkey if reused and stored else client.public_key_hex if client else ""
    return SignerPlan(client, [client_pubkey, uri.signer_pubkey], on_embedded_relay(config, uri.relays),
                      stored.user_pubkey if reused and stored else None)


def on_embedded_relay(config: Config, relays: Iterable[str]) -> bool:
    """Whether a signer's relays include this app's embedded relay (which runs only while the app does)."""
    hosts = {"127.0.0.1", "localhost", config.relays.embedded_host}
    ports = {f"ws://{f'[{h}]' if ':' in h else h}:{config.relays.embedded_port}" for h in hosts}
    return any(r.rstrip("/") in ports for r in relays)


def signer_writers(config: Config, data_dir: Path) -> list[str]:
    """The signer's keys the embedded relay admits, as the stored session knows them (none before a first run)."""
    if not config.signer.bunker.strip():
        return []
    session = read_session(data_dir)
    return [session.client_pubkey, session.signer_pubkey] if session is not None else []
