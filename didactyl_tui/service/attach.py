"""``didactyl attach``: this app as a window onto an agent that runs elsewhere (``didactyl serve``). No model runs here.

What it needs: the agent (``[attach] agent``: the nprofile ``serve`` prints, or an npub with ``[attach] relays``),
where it reads its direct messages (found before anything is sent: agent_address.py), and the admin's key — the key
the agent's ``[admin] pubkey`` names: ``$DIDACTYL_ADMIN_NSEC``, else a remote signer (``[attach] admin_bunker``,
NIP-46), else the admin key file (``[attach] admin_key_file``, else ``admin.key`` in the data dir, made on the first
attach). The agent learns that key by pairing (``--invite``: attached_pairing.py) or from its config. What you type
goes to the agent as NIP-17 messages from that key (attached_chat.py, attach_link.py).

The agent's own documents (memory, soul, tasks) are encrypted to the agent's key: they show and can be edited here
only when this app reaches that key too, through the agent's remote signer (``[signer] bunker``, NIP-46), and the
signer's key must be the agent's. Without it the chat and the inspector work, and a document edit is refused with a
line saying why (:class:`KeyElsewhereSigner`). docs/attach.md
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent.identity.keystore import read_key_file, write_key_file
from ..config import Config
from ..config_file import config_error
from ..errors import AgentError, ConfigError, NostrError
from ..nostr.event import Event
from ..nostr.keys import SecretKey
from ..nostr.nip19 import encode_npub
from ..nostr.pool import RelayPool
from ..nostr.remote_signer import RemoteSigner
from ..nostr.signer import LocalSigner, Signer
from .agent_address import AgentAddress, AgentRelays, find_agent_relays, parse_agent
from .agent_signer import connect_bunker

ENV_ADMIN_NSEC = "DIDACTYL_ADMIN_NSEC"
ADMIN_KEY_FILE = "admin.key"
ADMIN_SESSION_FILE = "admin-signer.json"  # the admin's remote signer connection ([attach] admin_bunker)


@dataclass(frozen=True, slots=True)
class AdminSigner:
    """The admin's key as attach holds it: in hand (the environment or the key file) or in a remote signer."""

    signer: Signer
    key_path: Path | None  # where the admin's key is kept (None: from the environment or a remote signer)
    created: bool  # made now: the agent does not know it yet
    remote: RemoteSigner | None = None
    key: SecretKey | None = field(default=None, repr=False)  # the key when in hand (fast unwrapping)

    async def close(self) -> None:
        if self.remote is not None:
            await self.remote.close()


@dataclass(frozen=True, slots=True)
class AttachTarget:
    """The agent attached to (hex), where it reads its direct messages, and the admin's signer that talks to it."""

    agent: str
    admin: Signer
    admin_key_path: Path | None  # where the admin's key is kept (None: from the environment or a remote signer)
    admin_key_created: bool  # made on this start: its npub must go into the agent's [admin] pubkey
    remote: RemoteSigner | None = None  # the admin's remote signer, closed with the window
    admin_key: SecretKey | None = field(default=None, repr=False)  # the admin's key when in hand (fast unwrapping)
    relays: AgentRelays = AgentRelays()  # found before anything is sent (agent_address.py)
    invitation: str = field(default="", repr=False)  # `attach --invite`: presented once at start

    async def close(self) -> None:
        if self.remote is not None:
            await self.remote.close()

    @property
    def admin_pubkey(self) -> str:
        return self.admin.public_key

    def first_attach_notice(self) -> str | None:
        if not self.admin_key_created or self.invitation:  # with an invitation, pairing tells the agent
            return None
        return (f"A new admin key was made for attaching ({self.admin_key_path}): the agent answers it once paired — "
                "run the attach line `didactyl serve` prints (with --invite), or put [admin] pubkey = "
                f"\"{encode_npub(self.admin_pubkey)}\" in the agent's config (`didactyl whoami --admin` prints it "
                "again)")


def agent_address_of(config: Config) -> AgentAddress | None:
    """``[attach] agent`` (an nprofile, npub or hex) and ``[attach] relays`` (None: not attached); ConfigError naming
    the key when it is not a public key."""
    text = config.attach.agent.strip()
    if not text:
        return None
    try:
        return parse_agent(text, config.attach.relays)
    except ValueError as exc:
        raise config_error(config.path, "attach", "agent", str(exc)) from None


def attach_agent_of(config: Config) -> str | None:
    """``[attach] agent``'s key as hex (None: not attached); ConfigError naming the key when it is not one."""
    address = agent_address_of(config)
    return address.pubkey if address is not None else None


def _admin_key(config: Config, data_dir: Path, env: Mapping[str, str]) -> tuple[SecretKey, Path | None, bool]:
    text = env.get(ENV_ADMIN_NSEC, "").strip()
    if text:
        try:
            return SecretKey.parse(text), None, False
        except NostrError:  # never echo it: it is a (slightly damaged) secret
            raise ConfigError(f"${ENV_ADMIN_NSEC} is not a valid nsec1… or 64-hex key", "Admin key") from None
    name = config.attach.admin_key_file.strip() or ADMIN_KEY_FILE
    path = Path(name).expanduser()
    path = path if path.is_absolute() else Path(data_dir) / path
    if path.exists():
        return read_key_file(path), path, False
    key = SecretKey.generate()
    write_key_file(path, key)
    return key, path, True


async def open_admin_signer(config: Config, data_dir: Path, env: Mapping[str, str]) -> AdminSigner:
    """The admin's key: ``$DIDACTYL_ADMIN_NSEC``, else ``[attach] admin_bunker`` (connected), else the admin key file
    (made, 0600, when there is none). ConfigError (one line) when it cannot be had."""
    bunker = config.attach.admin_bunker.strip()
    if bunker and not env.get(ENV_ADMIN_NSEC, "").strip():
        remote = await connect_bunker(bunker, data_dir, config, what="[attach] admin_bunker",
                                      session_name=ADMIN_SESSION_FILE)
        return AdminSigner(remote, None, False, remote)
    key, path, created = await asyncio.to_thread(_admin_key, config, data_dir, env)
    return AdminSigner(LocalSigner(key), path, created, key=key)


@dataclass(frozen=True, slots=True)
class AdminIdentity:
    npub: str
    pubkey: str
    source: str  # "env", "remote signer", "file" or "created" (made now)
    key_file: Path | None


async def admin_identity(config: Config, data_dir: Path, env: Mapping[str, str]) -> AdminIdentity:
    """``didactyl whoami --admin``: the admin's key as attach holds it (:func:`open_admin_signer`)."""
    admin = await open_admin_signer(config, data_dir, env)
    try:
        pubkey = admin.signer.public_key
    finally:
        await admin.close()
    source = ("env" if env.get(ENV_ADMIN_NSEC, "").strip() else "remote signer" if admin.remote is not None
              else "created" if admin.created else "file")
    return AdminIdentity(encode_npub(pubkey), pubkey, source, admin.key_path)


async def open_attach_target(config: Config, data_dir: Path, env: Mapping[str, str], *,
                             client_options: Mapping[str, Any] | None = None) -> AttachTarget | None:
    """The attach target the config names (None when this app runs the agent itself), with the relays the agent
    reads found (bounded by ``[relays] timeout_s``). ConfigError (one line) for a bad agent key or admin key, or when
    the admin key is the agent's own."""
    address = agent_address_of(config)
    if address is None:
        return None
    agent = address.pubkey
    admin = await open_admin_signer(config, data_dir, env)
    if admin.signer.public_key == agent:
        await admin.close()
        raise ConfigError("the admin key is the agent's own key: attach talks to the agent as its admin, with your "
                          "key", "Attach")
    try:
        relays = await find_agent_relays(address, config.run_relay_urls, timeout=config.relays.timeout_s,
                                         open_pool=lambda urls: RelayPool(urls, **(client_options or {})))
    except BaseException:
        await admin.close()
        raise
    return AttachTarget(agent, admin.signer, admin.key_path, admin.created, admin.remote, admin.key, relays,
                        config.invitation.strip())


def check_attached_signer(target: AttachTarget, signer_pubkey: str) -> None:
    """The agent's remote signer must hold the agent's key: a bunker for another key would show another agent's
    documents beside this agent's chat."""
    if signer_pubkey != target.agent:
        raise ConfigError(f"[signer] bunker holds {encode_npub(signer_pubkey)[:20]}…, not the agent attached to "
                          f"({encode_npub(target.agent)[:20]}…): point it at the agent's own signer, or leave it "
                          "empty to attach without the agent's documents", "Attach")


class KeyElsewhereSigner:
    """The agent's public key with no way to use its secret: what attach holds without the agent's signer. Every
    use says, in one line, what is missing."""

    def __init__(self, agent: str) -> None:
        self._agent = agent

    @property
    def public_key(self) -> str:
        return self._agent

    def _refuse(self) -> AgentError:
        return AgentError("the agent's key is not reachable from here (attached without [signer] bunker): its "
                          "memory, soul and tasks are read and changed where it runs, or here through its remote "
                          "signer", "Agent key elsewhere")

    async def sign_event(self, *, kind: int, content: str, created_at: int, tags: Sequence[Sequence[str]]) -> Event:
        raise self._refuse()

    async def nip44_encrypt(self, peer: str, plaintext: str) -> str:
        raise self._refuse()

    async def nip44_decrypt(self, peer: str, payload: str) -> str:
        raise self._refuse()
