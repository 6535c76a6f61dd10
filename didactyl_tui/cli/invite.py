"""``didactyl invite``: a new one-use invitation to pair an admin with this data dir's agent, and the one line that
presents it (docs/attach.md). It replaces any open invitation; a running ``didactyl serve`` takes it (the invitation
is read when one is presented), and ``serve`` started later while nobody is paired prints one of its own, which
replaces it: the line printed last is the one that works."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from ..config import Config
from .command import EXIT_OK, Output
from .parser import CommandFailed


async def invite(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output) -> int:
    from ..errors import AgentError
    from ..service.invitations import new_invitation

    try:
        line = await new_invitation(config, data, env)
    except AgentError as exc:
        raise CommandFailed(exc.message, exc.title) from None
    if args.json:
        out.json({"command": line.command, "agent": line.agent_npub, "relays": line.relays,
                  "expires_at": line.expires_at, "replaces_admin": line.replaces_admin})
        return EXIT_OK
    out.print(line.command)
    replaces = f", replacing {line.replaces_admin[:20]}…" if line.replaces_admin else ""
    out.note(f"run it where you will chat with the agent ({line.reach}): it works once, until {line.until}; whoever "
             f"runs it first becomes the agent's admin{replaces}")
    return EXIT_OK
