"""``didactyl bundle export|import FILE``: a backup that is itself Nostr (signed events + encrypted sessions)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from ..config import Config
from ..errors import AgentError
from .command import EXIT_OK, Output, open_service
from .parser import CommandFailed, UsageError


async def export(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output) -> int:
    async with open_service(config, data, env, out) as service:
        try:
            report = await service.bundle.export(Path(args.file))
        except AgentError as exc:
            raise CommandFailed(exc.message, exc.title) from None
    if args.json:
        out.json(report.to_json_dict())
    else:
        out.print(f"wrote {report.path} (mode 0600): {report.events} events, {report.sessions} conversations")
    return EXIT_OK


async def import_(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output) -> int:
    service = open_service(config, data, env, out)
    # The bundle is the truth being restored: the config's identity and soul are not published over it.
    await service.start(publish_identity=False)
    async with service:
        try:
            report = await service.bundle.import_(Path(args.file))
        except AgentError as exc:  # refused whole: nothing restored, nothing published
            raise UsageError(f"bundle refused: {exc.message}", exc.title) from None
    if args.json:
        out.json(report.to_json_dict())
    else:
        out.print(f"imported {report.path}: {report.events} events ({report.accepted} accepted by a relay, "
                  f"{report.pending} waiting in the outbox), {report.sessions} conversations")
    for reason in report.skipped:
        out.warn(f"not republished: {reason}")
    if report.events and not report.accepted and report.pending:
        raise CommandFailed("no relay accepted the imported events yet; they are kept in the outbox and sent "
                            "again whenever didactyl runs")
    return EXIT_OK
