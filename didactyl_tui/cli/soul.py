"""``didactyl soul show|publish``: the soul's own forms of two verbs (its other verbs are every document's:
cli/documents.py)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import AgentError, ConfigError
from .command import EXIT_OK, Output, open_service, read_file
from .parser import CommandFailed, UsageError


def _printable(text: str) -> str:
    return "".join(ch for ch in " ".join(text.split()) if ch.isprintable())


async def show(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output) -> int:
    """The soul in use, section by section, and the version it came from."""
    from ..service.types import DocumentKey

    async with open_service(config, data, env, out, read_only=True) as service:
        view = service.soul.view()
        unreadable = service.documents.snapshot(DocumentKey.SOUL).unreadable
    if args.json:
        out.json(view.to_json_dict())
        return EXIT_OK
    where = f"event {view.event_id} ({'encrypted' if view.encrypted else 'plain'})" if view.event_id else \
        f"{view.template.source} (not on the relays)"
    out.print(f"soul from {where}")
    if unreadable is not None:
        out.warn(f"a newer soul (event {unreadable.event_id[:12]}) cannot be used: {unreadable.reason}")
    for sec in view.template.sections:
        source = f"tool {sec.tool}" if sec.tool else f"content: {_printable(sec.content or '')[:80]}"
        out.print(f"- {_printable(sec.section)} [{sec.role}] {source}")
    return EXIT_OK


def read_soul_file(path: str, text: str) -> Any:
    from ..service.types import read_soul_text

    try:
        return read_soul_text(path, text)
    except (AgentError, ConfigError) as exc:
        raise UsageError(exc.message, "Bad soul") from None


async def publish(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
                  stdin: Any) -> int:
    """Publish a soul file (or the configured soul) as the soul's new version."""
    from ..service.types import NewerVersionKnown

    template = read_soul_file(args.file, read_file(args.file, stdin)) if args.file else None
    async with open_service(config, data, env, out) as service:
        try:
            outcome = await service.soul.publish(template, encrypt=not args.plain)
        except NewerVersionKnown as exc:  # a newer soul is known: nothing published
            raise CommandFailed(exc.message, exc.title) from None
        except AgentError as exc:  # the linter refused it: nothing published
            raise UsageError(f"soul refused: {exc.message}", exc.title) from None
        view = service.soul.view()
    if args.json:
        out.json({**view.to_json_dict(), "accepted_by": outcome.accepted_by,
                  "relays": {url: {"verdict": v.verdict.value, "message": v.message}
                             for url, v in outcome.results.items()}})
    else:
        out.print(f"published the soul ({len(view.template.sections)} sections) as event {view.event_id}: "
                  f"{outcome.summary()}")
    if not outcome.any_accepted:
        raise CommandFailed(f"no relay accepted the soul: {outcome.summary()}; it is kept in the outbox and sent "
                            "again whenever didactyl runs")
    return EXIT_OK
