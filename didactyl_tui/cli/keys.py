"""``didactyl keygen`` and ``didactyl whoami``: the agent's key, without starting the service."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

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
    from ..service.key_file import agent_key

    bunker = load_config(args.config, dict(env)).signer.bunker
    try:
        key = agent_key(data_dir(dict(env)), env, bunker=bunker)
    except AgentError as exc:
        raise CommandFailed(exc.message, exc.title) from None
    if args.json:
        out.json({"npub": key.npub, "pubkey": key.pubkey, "source": key.source,
                  "key_file": str(key.key_file) if key.key_file else None})
    else:
        out.print(key.npub)
        out.print(key.pubkey)
    return EXIT_OK
