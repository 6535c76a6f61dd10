"""``didactyl attach``: this app as a window onto an agent that runs elsewhere (``didactyl serve``). No model runs here.

What it needs: the agent (``[attach] agent``, an npub) and the admin's key — the key the agent's ``[admin] pubkey``
names: ``$DIDACTYL_ADMIN_NSEC``, else a remote signer (``[attach] admin_bunker``, NIP-46), else the admin key file
(``[attach] admin_key_file``, else ``admin.key`` in the data dir, made on the first attach and its npub said, to put
in the agent's config). What you type goes to the agent as
NIP-17 messages from that key (attached_chat.py, attach_link.py).

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

from ..agent.identity.cache import pubkey_hex
from ..agent.identity.keystore import read_key_file, write_key_file
from ..config import Config
from ..config_file import config_error
from ..errors import AgentError, ConfigError, NostrError
from ..nostr.event import Event
from ..nostr.keys import SecretKey
from ..nostr.nip19 import encode_npub
from ..nostr.remote_signer import RemoteSigner
from ..nostr.signer import LocalSigner, Signer
from .agent_signer import connect_bunker

ENV_ADMIN_NSEC = "DIDACTYL_ADMIN_NSEC"
ADMIN_KEY_FILE = "admin.key"
ADMIN_SESSION_FILE = "admin-signer.json"  # the admin's remote signer connection ([attach] admin_bunker)


@dataclass(frozen=True, slots=True)
class AttachTarget:
    """The agent attached to (hex) and the admin's signer that talks to it."""

    agent: str
    admin: Signer
    admin_key_path: Path | None  # where the admin's key is kept (None: from the environment or a remote signer)
    admin_key_created: bool  # made on this start: its npub must go into the agent's [admin] pubkey
    remote: RemoteSigner | None = None  # the admin's remote signer, closed with the window
    admin_key: SecretKey | None = field(default=None, repr=False)  # the admin's key when in hand (fast unwrapping)

    async def close(self) -> None:
        if self.remote is not None:
            await self.remote.close()

    @property
    def admin_pubkey(self) -> str:
        return self.admin.public_key

    def first_attach_notice(self) -> str | None:
        if not self.admin_key_created:
            return None
        return (f"A new admin key was made for attaching ({self.admin_key_path}): put [admin] pubkey = "
                f"\"{encode_npub(self.admin_pubkey)}\" in the agent's config (where `didactyl serve` runs) so it "
                "answers you")


def attach_agent_of(config: Config) -> str | None:
    """``[attach] agent`` as hex (None: not attached); ConfigError naming the key when it is not a public key."""
    text = config.attach.agent.strip()
    if not text:
        return None
    try:
        return pubkey_hex(text)
    except ValueError as exc:
        raise config_error(config.path, "attach", "agent", str(exc)) from None


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


async def open_attach_target(config: Config, data_dir: Path, env: Mapping[str, str]) -> AttachTarget | None:
    """The attach target the config names (None when this app runs the agent itself). ConfigError (one line) for
    a bad agent key or admin key, or when the admin key is the agent's own."""
    agent = attach_agent_of(config)
    if agent is None:
        return None
    bunker = config.attach.admin_bunker.strip()
    if bunker and not env.get(ENV_ADMIN_NSEC, "").strip():
        remote = await connect_bunker(bunker, data_dir, config, what="[attach] admin_bunker",
                                      session_name=ADMIN_SESSION_FILE)
        target = AttachTarget(agent, remote, None, False, remote)
    else:
        key, path, created = await asyncio.to_thread(_admin_key, config, data_dir, env)
        target = AttachTarget(agent, LocalSigner(key), path, created, admin_key=key)
    if target.admin_pubkey == agent:
        await target.close()
        raise ConfigError("the admin key is the agent's own key: attach talks to the agent as its admin, with your "
                          "key", "Attach")
    return target


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
