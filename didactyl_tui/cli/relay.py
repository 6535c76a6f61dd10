"""``didactyl relay``: the data dir's shared relay in the foreground; ``relay status``: what the running one
enforces."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping
from pathlib import Path

from ..config import Config
from ..config_file import data_dir, load_config
from .command import EXIT_FAILED, EXIT_OK, Output
from .parser import CommandFailed, UsageError


def cmd_relay(args: argparse.Namespace, env: Mapping[str, str], out: Output) -> int:
    """This data dir's shared relay in the foreground (every didactyl on the data dir finds and uses it);
    exit 3 when one already serves it. Its limits and allow-list come from ``[relays.embedded]``.
    ``relay status``: what the running one enforces."""
    from ..errors import AgentError
    from ..service.relay_status import run_relay

    config = load_config(args.config, dict(env))
    data = data_dir(dict(env))
    if getattr(args, "relay_command", None) == "status":
        return asyncio.run(_relay_status(args, config, data, env, out))
    host = config.relays.embedded_host if args.host is None else args.host
    port = config.relays.embedded_port if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be 0..65535, not {port}")
    db = Path(args.db).expanduser() if args.db else None
    try:
        return asyncio.run(run_relay(config, data, env, db_path=db, host=host, port=port))
    except AgentError as exc:
        raise CommandFailed(exc.message, exc.title) from None
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return EXIT_OK


async def _relay_status(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str],
                        out: Output) -> int:
    from ..service.relay_status import embedded_relay_status

    status = await embedded_relay_status(config, data, env)
    if args.json:
        out.json(status.to_json())
    else:
        for line in status.lines():
            out.print(line)
    return EXIT_OK if status.running else EXIT_FAILED
