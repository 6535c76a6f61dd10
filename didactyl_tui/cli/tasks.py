"""``didactyl tasks [--json]``: the agent's tasks, one a line (the task list's other verbs are every document's:
cli/documents.py)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from ..config import Config
from .command import EXIT_OK, Output, open_service


async def show(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output) -> int:
    from ..service.types import DocumentKey

    async with open_service(config, data, env, out, read_only=True) as service:
        tasks = service.documents.value(DocumentKey.TASKS)
        snap = service.documents.snapshot(DocumentKey.TASKS)
    if snap.unreadable is not None:
        out.warn(f"the newest task list (event {snap.unreadable.event_id[:12]}) cannot be used: "
                 f"{snap.unreadable.reason}" + ("; showing the last one that can" if snap.event_id else ""))
    if args.json:
        out.json({"tasks": [t.to_dict() for t in tasks.tasks], "next_id": tasks.next_id})
        return EXIT_OK
    if not tasks.tasks:
        out.print("no tasks")
    for t in tasks.tasks:
        note = f" — {_printable(t.note)}" if t.note else ""
        out.print(f"#{t.id} [{t.status}] {_printable(t.title)}{note}")
    return EXIT_OK


def _printable(text: str) -> str:
    """One line with no control characters (the text came from the model, through the relays)."""
    return "".join(ch for ch in " ".join(text.split()) if ch.isprintable())
