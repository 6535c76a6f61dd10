"""``didactyl memory show|save|status|history``: the agent's memories from the command line."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import AgentError
from . import EXIT_OK, CommandFailed, UsageError, _Out, _service


def _snapshot_json(snap: Any, service: Any, pending: list[Any]) -> dict[str, Any]:
    return {
        "type": snap.type.value,
        "content": snap.content,
        "chars": snap.chars,
        "utf8_bytes": snap.utf8_bytes,
        "limit_chars": snap.limit_chars,
        "event_id": snap.event_id,
        "created_at": snap.created_at,
        "relays": list(snap.relays),
        "loaded": snap.loaded,
        "relay_versions": {url: {"event_id": eid, "created_at": ts}
                           for url, (eid, ts) in service.memory_relay_versions(snap.type).items()},
        "pending": [p.to_json_dict() for p in pending],
    }


async def show(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str],
                       out: _Out) -> int:
    from ..service import MemoryType

    t = MemoryType.parse(args.memory_type)
    if getattr(args, "version", None):
        return await _show_version(args, config, data, env, out, t)
    async with _service(config, data, env, out, read_only=True) as service:
        snap = service.memory(t)
        pending = await service.pending_publishes(t)
        unconfirmed = [p for p in pending if p.event_id == snap.event_id and not p.accepted_by]
        if unconfirmed and not args.json:
            out.warn(f"this version (event {snap.event_id[:8]}) is not on any relay yet: it is pending in the outbox")
        if args.json:
            out.json(_snapshot_json(snap, service, pending))
        elif snap.content:
            out.print(snap.content, end="" if snap.content.endswith("\n") else "\n")
        if not snap.loaded:
            raise CommandFailed(f"no relay answered: the {t.title.lower()} could not be read")
        if not args.json and not snap.content:
            out.note(f"(the {t.title.lower()} is empty)")
    return EXIT_OK


async def _show_version(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: _Out,
                        t: Any) -> int:
    async with _service(config, data, env, out, read_only=True) as service:
        try:
            version = await service.memory_version(t, args.version)
            content = version.content
        except AgentError as exc:
            raise CommandFailed(exc.message, exc.title) from None
    if args.json:
        out.json({**version.to_json_dict(), "type": t.value, "content": content})
    elif content:
        out.print(content, end="" if content.endswith("\n") else "\n")
    return EXIT_OK


async def save(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: _Out,
                       content: str) -> int:
    from ..service import MemoryType, NewerVersionKnown

    t = MemoryType.parse(args.memory_type)
    async with _service(config, data, env, out) as service:
        try:
            result = await service.save_memory(t, content)  # the one save path: it validates, then publishes
        except NewerVersionKnown as exc:  # another device's newer version: nothing published
            raise CommandFailed(exc.message, exc.title) from None
        except AgentError as exc:  # bad input: nothing published
            raise UsageError(exc.message, exc.title) from None
        not_kept = service.memory_not_persisted(result.event_id)  # e.g. disk full: not in the outbox
    if args.json:
        out.json(result.to_json_dict())
    else:
        outcome = result.outcome
        out.print(f"saved the {t.title.lower()} ({len(content):,} chars) as event {result.event_id}: "
                  f"{outcome.summary()}")
    if result.refused:
        raise CommandFailed(f"every relay refused the {t.title.lower()} for good: {result.outcome.summary()}; it "
                            "is not resent (your text is in `didactyl memory history`); later saves are not "
                            "affected")
    if not result.any_accepted and not_kept:
        raise CommandFailed(f"the {t.title.lower()} was not saved: {not_kept}; and no relay accepted it: "
                            f"{result.outcome.summary()}", "Not saved")
    if not result.any_accepted:
        raise CommandFailed(f"no relay accepted the {t.title.lower()}: {result.outcome.summary()}; it is kept "
                            "in the outbox and sent again whenever didactyl runs")
    if not_kept:
        out.warn(f"saved on the relays but not on this device: {not_kept}")
    return EXIT_OK


async def status(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str],
                         out: _Out) -> int:
    from ..service import MemoryType, when

    types = [MemoryType.parse(args.memory_type)] if args.memory_type else list(MemoryType)
    # Without --fix the command only looks: no background repair, no profile publish.
    async with _service(config, data, env, out, read_only=not args.fix) as service:
        statuses = [await service.memory_status(t, bring_up_to_date=args.fix) for t in types]
    if args.json:
        out.json({s.type.value: s.to_json_dict() for s in statuses})
    else:
        for status in statuses:
            newest = (f"newest {status.newest_event_id[:8]} ({when(status.newest_created_at)})"
                      if status.newest_event_id else "no version on any relay")
            out.print(f"{status.type.title}: {newest}")
            width = max((len(r.url) for r in status.relays), default=0)
            for relay in status.relays:
                line = f"  {relay.url.ljust(width)}  {relay.describe()}"
                if relay.lagging and relay.republished is None and status.newest_event_id:
                    line += f" (--fix would send {status.newest_event_id[:8]})"
                out.print(line)
            if status.brought_up_to_date:
                n = len(status.brought_up_to_date)
                out.print(f"  brought {n} lagging relay{'s' if n != 1 else ''} up to date")
            for pending in status.pending:
                out.print(f"  outbox: {pending.describe()}")
    if not any(s.any_reachable for s in statuses):
        raise CommandFailed("no relay answered: cannot tell which version each relay holds")
    return EXIT_OK


async def history(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str],
                          out: _Out) -> int:
    from ..service import MemoryType, when

    t = MemoryType.parse(args.memory_type)
    async with _service(config, data, env, out, read_only=True) as service:
        versions = await service.memory_history(t)
        rows = [v.to_json_dict() for v in versions]
    if args.json:
        out.json({"type": t.value, "versions": rows})
        return EXIT_OK
    if not rows:
        out.note(f"(no {t.title.lower()} version seen yet)")
        return EXIT_OK
    for row in rows:
        mark = "*" if row["current"] else " "
        size = f"{row['chars']:,} chars" if row["chars"] is not None else "does not decrypt"
        note = f"  {row['note']}" if row["note"] else ""
        out.print(f"{mark} {row['event_id']}  {when(row['created_at'])}  {row['origin']:<6}  {size}{note}")
    return EXIT_OK
