"""The agent's key for the commands that start nothing (``didactyl keygen``, ``didactyl whoami``): a new key written
to the key file (0600), or the key in use and where it comes from — asking a remote signer only when this data dir
has never connected to it (:func:`agent_key_connecting`). The secret never leaves this module."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..agent.identity.keystore import ENV_NSEC, key_file_path, load_agent_key, write_key_file
from ..agent.identity.signer_session import read_session, session_path
from ..agent.private_files import ensure_data_dir
from ..config import Config
from ..errors import AgentError, ConfigError
from ..nostr.keys import SecretKey
from ..nostr.nip19 import encode_npub


@dataclass(frozen=True, slots=True)
class AgentKeyInfo:
    """The agent's public identity and where its key is: ``source`` "env" ($DIDACTYL_NSEC), "file", "created" or
    "remote signer" (``key_file`` is then the session file)."""

    npub: str
    pubkey: str
    source: str
    key_file: Path | None
    env_wins: bool = False  # $DIDACTYL_NSEC is set: it wins over the key file

    @property
    def env_variable(self) -> str:
        return ENV_NSEC


def generate_key(data_dir: Path, env: Mapping[str, str], *, force: bool = False) -> AgentKeyInfo:
    """A new key written to the data dir's key file (0600; an existing one is replaced only with ``force``)."""
    key = SecretKey.generate()
    path = write_key_file(key_file_path(ensure_data_dir(data_dir)), key, force=force)
    return AgentKeyInfo(key.npub, key.public_key_hex, "created", path, env_wins=bool(env.get(ENV_NSEC, "").strip()))


def agent_key(data_dir: Path, env: Mapping[str, str], *, bunker: str = "") -> AgentKeyInfo:
    """The key in use ($DIDACTYL_NSEC, else the key file, or with ``bunker`` the remote signer's as the stored
    session knows it); AgentError naming what is missing when there is none."""
    if bunker.strip():
        try:
            session = read_session(data_dir)
        except ConfigError as exc:
            raise AgentError(exc.message, exc.title) from None
        if session is None or not session.user_pubkey:
            raise AgentError("the agent's key is in a remote signer ([signer] bunker) that this data dir has not "
                             f"connected to yet ({session_path(data_dir)} is missing): start didactyl once", "No key")
        pubkey = session.user_pubkey
        return AgentKeyInfo(encode_npub(pubkey), pubkey, "remote signer", session_path(data_dir))
    if not env.get(ENV_NSEC, "").strip() and not key_file_path(data_dir).exists():
        raise AgentError(f"no agent key yet ({key_file_path(data_dir)} does not exist); run `didactyl keygen` "
                         "or start didactyl once", "No key")
    loaded = load_agent_key(data_dir, env, create=False)
    return AgentKeyInfo(loaded.key.npub, loaded.key.public_key_hex, loaded.source, loaded.path)


def key_file_of(data_dir: Path) -> Path:
    """Where the data dir's key file is (whether or not it exists)."""
    return key_file_path(data_dir)


async def agent_key_connecting(config: Config, data_dir: Path, env: Mapping[str, str],
                               warn: Callable[[str], None]) -> AgentKeyInfo:
    """:func:`agent_key`; with a remote signer this data dir has not connected to yet, connected to first as any
    command that signs does (the bunker:// URI's secret, the key it names checked, the connection kept in
    signer.json). AgentError (or the signer's ConfigError) naming what is missing otherwise."""
    bunker = config.signer.bunker
    if not bunker.strip() or session_path(data_dir).exists():
        return agent_key(data_dir, env, bunker=bunker)
    from .app import AppService
    from .events import ServiceWarning

    service = AppService(config, data_dir=data_dir, env=env, read_only=True, start_mcp=False)
    service.add_listener(lambda ev: warn(ev.message) if isinstance(ev, ServiceWarning) else None)
    await service.start(publish_identity=False)
    try:
        pubkey = service.identity.agent_pubkey
    finally:
        await service.stop()
    return AgentKeyInfo(encode_npub(pubkey), pubkey, "remote signer", session_path(data_dir))
