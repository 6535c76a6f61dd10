"""The agent's side of pairing, for the views: what ``didactyl serve`` says once at start (where the agent's key was
made, and the one line that attaches — with a new invitation while nobody is paired) and ``didactyl invite`` (a new
invitation at any time). The invitations themselves: agent/dm/invitation.py; taking one: dm_pairing.py.

The line names the relays the agent reads, as its kind 10050 does (the relays in use, the embedded one first): the
line printed last is the one that works (each new invitation replaces the open one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ..agent.dm.invitation import issue
from ..config import Config
from ..errors import AgentError
from ..nostr.nip17 import MAX_DM_RELAYS
from ..nostr.nip19 import encode_npub
from .agent_address import attach_command, is_loopback
from .key_file import agent_key
from .live_policy import admin_pubkey_of
from .relay_status import embedded_relay_status

if TYPE_CHECKING:
    from .app import AppService


@dataclass(frozen=True, slots=True)
class AttachLine:
    command: str  # didactyl attach nprofile1… [--invite …]
    agent_npub: str
    relays: list[str]
    expires_at: int | None = None  # with an invitation: until when it works
    replaces_admin: str | None = None  # with an invitation: the admin it replaces once used (npub)

    @property
    def until(self) -> str:
        if self.expires_at is None:
            return ""
        return datetime.fromtimestamp(self.expires_at).astimezone().strftime("%Y-%m-%d %H:%M %Z")

    @property
    def reach(self) -> str:
        """Who can run it, by the relays it names."""
        if self.relays and all(is_loopback(u) for u in self.relays):
            return "on this machine only (a loopback address): from another one, attach through a relay both reach, " \
                   "docs/attach.md"
        return "wherever these relays are reached"


def _line(agent: str, relays: list[str], *, ttl_s: float, admin: str | None, data_dir: Path,
          invite: bool) -> AttachLine:
    relays = relays[:MAX_DM_RELAYS]
    if not invite:
        return AttachLine(attach_command(agent, relays), encode_npub(agent), relays)
    secret, made = issue(data_dir, ttl_s=ttl_s, admin_then=admin, now=int(time.time()))
    return AttachLine(attach_command(agent, relays, secret), encode_npub(agent), relays, made.expires_at,
                      encode_npub(admin) if admin else None)


def serving_notes(service: AppService) -> list[str]:
    """What ``serve`` says once it runs: the key made (when it was), and how to attach (a new invitation while nobody
    is paired)."""
    runtime = service.runtime
    notes = []
    if runtime.key_made is not None:
        notes.append(f"the agent's key was made on this start: {runtime.key_made} (mode 0600). It is the agent's "
                     "identity: keep a copy of that file somewhere safe (losing it loses the agent); `didactyl bundle "
                     "export FILE` backs up its memory, soul, tasks and chats (restored with the same key)")
    return [*notes, attach_note(service)]


def attach_note(service: AppService) -> str:
    """How to attach to the agent as it runs now (its relays as the pool has them): the admin's line, or a new
    invitation while nobody is paired."""
    runtime, config = service.runtime, service.config
    admin = service.policy.rights.dm.admin
    try:
        line = _line(runtime.signer.public_key, runtime.pool.urls, ttl_s=config.dm.invitation_ttl_s, admin=admin,
                     data_dir=service.data_dir, invite=admin is None)
    except AgentError as exc:
        return f"no invitation was made ({exc.message}): set [admin] pubkey in the config to pair"
    if admin is not None:
        return f"to attach as its admin ({', '.join(line.relays)}; {line.reach}):\n    {line.command}"
    return (f"nobody is paired with this agent yet. Run this where you will chat with it ({line.reach}; it works "
            f"once, until {line.until}; whoever runs it first becomes the admin):\n    {line.command}")


async def new_invitation(config: Config, data_dir: Path, env: Mapping[str, str]) -> AttachLine:
    """``didactyl invite``: a new invitation (replacing any open one) and its line; AgentError when the agent has no
    key yet or no relay it reads is known."""
    agent = agent_key(data_dir, env, bunker=config.signer.bunker)
    relays: list[str] = []  # as serve's pool has them: the embedded relay first
    if config.relays.embedded:
        status = await embedded_relay_status(config, data_dir, env)
        if status.running:
            relays.append(status.url)
    relays += [u for u in config.run_relay_urls if u not in relays]
    if not relays:
        raise AgentError("the attach line names the relays the agent reads, and none is known: its embedded relay is "
                         "not running (start `didactyl serve`, then run this again) and [relays] urls is empty",
                         "Invite")
    return await asyncio.to_thread(_line, agent.pubkey, relays, ttl_s=config.dm.invitation_ttl_s,
                                   admin=admin_pubkey_of(config), data_dir=data_dir, invite=True)
