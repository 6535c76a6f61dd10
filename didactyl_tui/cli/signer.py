"""``didactyl signer connect``: the agent's remote signer (NIP-46) connected again, when the connection kept in
``signer.json`` no longer serves (the signer signs with another key than the one it was made for, or forgot this app).
The new connection is checked (the signer signs with the key it names) before it replaces anything."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from ..config import Config
from .command import EXIT_OK, Output, read_text
from .parser import UsageError


async def connect(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
                  stdin: TextIO) -> int:
    from ..service.signer_setup import connect_signer

    text = read_text(args.uri, stdin).strip()
    if not text:
        raise UsageError("give the bunker:// URI from your signer: as an argument, or on stdin ('-')")
    kept = await connect_signer(config, data, env, text, on_auth_url=out.warn, warn=out.warn)
    out.print(kept.agent_npub)
    out.note(f"connected: the connection is in {kept.session_file}, [signer] bunker in {kept.config_file}")
    if kept.config_problem:
        out.warn(kept.config_problem)
    return EXIT_OK
