"""``didactyl keygen`` and ``didactyl whoami``: the agent's key, without starting the service — but for a remote
signer this data dir has not connected to yet (connected to, as any command that signs does), and ``whoami --admin``
(the admin's key, as ``attach`` holds it)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping
from pathlib import Path

from ..config import Config
from ..config_file import data_dir, load_config
from .command import EXIT_OK, Output
from .parser import CommandFailed


def cmd_keygen(args: argparse.Namespace, env: Mapping[str, str], out: Output) -> int:
    from ..service.key_file import generate_key

    made = generate_key(data_dir(dict(env)), env, force=args.force)
    if load_config(args.config, dict(env)).signer.bunker.strip():
        out.warn("a remote signer is configured ([signer] bunker): the agent uses its key, not this file")
    out.print(made.npub)
    out.print(made.pubkey)
    out.note(f"wrote {made.key_file} (mode 0600)")
    if made.env_wins:
        out.warn(f"${made.env_variable} is set and wins over the key file")
    return EXIT_OK


def cmd_whoami(args: argparse.Namespace, env: Mapping[str, str], out: Output) -> int:
    from ..errors import AgentError
    from ..service.key_file import agent_key_connecting

    config = load_config(args.config, dict(env))
    if args.admin:
        return asyncio.run(_admin_whoami(args, config, env, out))
    try:
        key = asyncio.run(agent_key_connecting(config, data_dir(dict(env)), env, out.warn))
    except AgentError as exc:
        raise CommandFailed(exc.message, exc.title) from None
    _print_key(args, out, key.npub, key.pubkey, key.source, key.key_file)
    return EXIT_OK


async def _admin_whoami(args: argparse.Namespace, config: Config, env: Mapping[str, str], out: Output) -> int:
    """The admin's key, as `didactyl attach` holds it (made, 0600, when there is none)."""
    from ..service.attach import admin_identity

    admin = await admin_identity(config, data_dir(dict(env)), env)
    if admin.source == "created":
        out.note(f"made your admin key: {admin.key_file} (mode 0600)")
    _print_key(args, out, admin.npub, admin.pubkey, admin.source, admin.key_file)
    return EXIT_OK


def _print_key(args: argparse.Namespace, out: Output, npub: str, pubkey: str, source: str,
               key_file: Path | None) -> None:
    if args.json:
        out.json({"npub": npub, "pubkey": pubkey, "source": source, "key_file": str(key_file) if key_file else None})
    else:
        out.print(npub)
        out.print(pubkey)
