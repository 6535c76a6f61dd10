"""``didactyl keygen`` and ``didactyl whoami``: the agent's key, without starting the service."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from ..config_file import data_dir
from .command import EXIT_OK, Output
from .parser import CommandFailed


def cmd_keygen(args: argparse.Namespace, env: Mapping[str, str], out: Output) -> int:
    from ..service import ENV_NSEC, SecretKey, ensure_data_dir, key_file_path, write_key_file

    data = ensure_data_dir(data_dir(dict(env)))
    key = SecretKey.generate()
    path = write_key_file(key_file_path(data), key, force=args.force)
    out.print(key.npub)
    out.print(key.public_key_hex)
    out.note(f"wrote {path} (mode 0600)")
    if env.get(ENV_NSEC, "").strip():
        out.warn(f"${ENV_NSEC} is set and wins over the key file")
    return EXIT_OK


def cmd_whoami(args: argparse.Namespace, env: Mapping[str, str], out: Output) -> int:
    from ..service import ENV_NSEC, key_file_path, load_agent_key

    data = data_dir(dict(env))
    if not env.get(ENV_NSEC, "").strip() and not key_file_path(data).exists():
        raise CommandFailed(f"no agent key yet ({key_file_path(data)} does not exist); run `didactyl keygen` "
                            "or start didactyl once", "No key")
    loaded = load_agent_key(data, env, create=False)
    if args.json:
        out.json({"npub": loaded.key.npub, "pubkey": loaded.key.public_key_hex, "source": loaded.source,
                  "key_file": str(loaded.path) if loaded.path else None})
    else:
        out.print(loaded.key.npub)
        out.print(loaded.key.public_key_hex)
    return EXIT_OK
