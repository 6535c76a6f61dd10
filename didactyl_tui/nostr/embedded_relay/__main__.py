"""Run the embedded relay as a process of its own (benchmarks, attack tests, a launcher):

    python -m didactyl_tui.nostr.embedded_relay --db relay.sqlite3 [--port 0] [--limits JSON]
        [--writers HEX,HEX] [--gift-wrap-to HEX,...] [--compression]

Prints the relay's URL on stdout once it listens; stops on SIGINT/SIGTERM. ``--limits`` is a JSON
object of :class:`RelayLimits` fields to change, e.g. ``'{"max_db_bytes": 1048576}'``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path

from .foreground import serve_forever
from .limits import RelayLimits


def _keys(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m didactyl_tui.nostr.embedded_relay")
    parser.add_argument("--db", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--limits", default="{}", help="JSON object of RelayLimits fields")
    parser.add_argument("--writers", default=None, help="comma-separated hex pubkeys: turns the allow-list on")
    parser.add_argument("--gift-wrap-to", default="", help="comma-separated hex pubkeys gift wraps may address")
    parser.add_argument("--compression", action="store_true", help="offer permessage-deflate")
    args = parser.parse_args(argv)
    try:
        changes = json.loads(args.limits)
        known = {f.name for f in dataclasses.fields(RelayLimits)}
        if not isinstance(changes, dict) or set(changes) - known:
            raise ValueError(f"unknown limits: {sorted(set(changes) - known)}")
        limits = RelayLimits().replace(**changes)
    except ValueError as exc:
        print(f"--limits: {exc}", file=sys.stderr)
        return 2
    options = {
        "limits": limits,
        "allowed_writers": None if args.writers is None else _keys(args.writers),
        "gift_wrap_recipients": _keys(args.gift_wrap_to),
        "compression": args.compression,
    }
    try:
        asyncio.run(serve_forever(args.host, args.port, Path(args.db), **options))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
