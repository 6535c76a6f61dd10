"""``python -m didactyl_tui.nostr.embedded_relay.daemon --data-dir DIR``: the shared relay process.

Started detached by :func:`.shared.ensure_shared_relay`. ``didactyl relay`` runs the same thing in the
foreground by calling :func:`.process.run_relay_process` (``idle_exit_s=0, announce=True``).
Nothing imports this module: it only runs as ``__main__``.

Run so, it does without OpenSSL (:func:`without_openssl`), and loads the relay only once that is settled.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .limits import DEFAULT_IDLE_EXIT_S

MAX_OPTIONS_CHARS = 64 * 1024


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, not {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, not {text}")
    return value


def _options(text: str) -> dict[str, Any]:
    if len(text) > MAX_OPTIONS_CHARS:
        raise argparse.ArgumentTypeError(f"longer than {MAX_OPTIONS_CHARS} characters")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object of EmbeddedRelay keyword arguments")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m didactyl_tui.nostr.embedded_relay.daemon",
                                     description="Serve a data dir's embedded Nostr relay (one per data dir).")
    parser.add_argument("--data-dir", required=True, type=Path, help="the didactyl data dir (holds relay.lock)")
    parser.add_argument("--db", type=Path, help="SQLite file (default <data dir>/relay.sqlite3)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=7447,
                        help="port (default 7447; taken by another program: a free one; 0: any free one)")
    parser.add_argument("--idle-exit", type=_seconds, default=DEFAULT_IDLE_EXIT_S, metavar="SECONDS",
                        help=f"exit after this long with no client (default {DEFAULT_IDLE_EXIT_S:g}; 0: never)")
    parser.add_argument("--relay-options", type=_options, default={}, metavar="JSON",
                        help="keyword arguments for EmbeddedRelay (limits, allow-list), as a JSON object")
    parser.add_argument("--announce", action="store_true", help="print the URL on stdout once listening")
    return parser


def without_openssl() -> None:
    """Keep OpenSSL out of this process: it serves plain ws:// (TLS, when wanted, is a proxy's job) and hashes
    with SHA-256 (event ids) and SHA-1 (the websocket handshake) only, yet asyncio would load OpenSSL for
    ``ssl`` and hashlib for ``_hashlib``: ~4.5 MiB of the relay's ~30 MiB at rest (bench/idle_rss_bench.py).
    Both imports then fail as on a Python built without OpenSSL, which asyncio, hashlib and hmac expect:
    hashlib uses its own SHA-256. Call it before anything imports asyncio or hashlib."""
    for name in ("ssl", "_hashlib"):
        # None here: the import raises ImportError (documented for sys.modules; typeshed types its values as modules)
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    import asyncio  # here, not above: after without_openssl()

    from .process import EXIT_FAILED, configure_logging, run_relay_process

    args = build_parser().parse_args(argv)
    configure_logging()
    data_dir = args.data_dir.expanduser()
    try:
        return asyncio.run(run_relay_process(
            data_dir, db_path=args.db.expanduser() if args.db else None, host=args.host, port=args.port,
            idle_exit_s=args.idle_exit, relay_options=args.relay_options, announce=args.announce,
        ))
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return EXIT_FAILED
    except OSError as exc:  # e.g. the data dir cannot be created
        print(f"error: {exc.strerror or exc}: {exc.filename or data_dir}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    without_openssl()
    sys.exit(main())
