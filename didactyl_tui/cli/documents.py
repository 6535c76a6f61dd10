"""The verbs every document of the agent's has on the command line — ``show``, ``save``, ``edit``, ``status``
(``--fix``), ``history``, ``diff``, ``rollback`` — for ``didactyl memory --type T …`` (the memories) and for
``didactyl soul …``, ``didactyl tasks …``, ``didactyl profile …``, ``didactyl contacts …`` and
``didactyl relays …`` (that document). One path for all: the service's document API."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..errors import AgentError
from .command import EXIT_OK, Output, open_service
from .parser import CommandFailed, UsageError

if TYPE_CHECKING:
    from ..service.types import DocumentKey


def _snapshot_json(snap: Any, service: Any, pending: list[Any]) -> dict[str, Any]:
    unreadable = snap.unreadable
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
        "unreadable": None if unreadable is None else {"event_id": unreadable.event_id, "relay": unreadable.relay,
                                                       "reason": unreadable.reason},
        "relay_versions": {url: {"event_id": eid, "created_at": ts}
                           for url, (eid, ts) in service.documents.relay_versions(snap.type).items()},
        "pending": [p.to_json_dict() for p in pending],
    }


async def show(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
               key: DocumentKey) -> int:
    """The document's text (decrypted) as it is in use; ``--version`` a past one from the history."""
    if getattr(args, "version", None):
        return await _show_version(args, config, data, env, out, key)
    title = key.title.lower()
    async with open_service(config, data, env, out, read_only=True) as service:
        snap = service.documents.snapshot(key)
        pending = await service.documents.pending_publishes(key)
        unconfirmed = [p for p in pending if p.event_id == snap.event_id and not p.accepted_by]
        if unconfirmed and snap.event_id and not args.json:
            out.warn(f"this version (event {snap.event_id[:8]}) is not on any relay yet: it is pending in the outbox")
        if args.json:
            out.json(_snapshot_json(snap, service, pending))
        elif snap.content:
            out.print(snap.content, end="" if snap.content.endswith("\n") else "\n")
        if not snap.loaded:
            raise CommandFailed(f"no relay answered: the {title} could not be read")
        if not args.json and snap.event_id is None and snap.unreadable is None:
            out.note(f"(the {title} is not on the relays yet)" if snap.content else f"(the {title} is empty)")
    return EXIT_OK


async def _show_version(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
                        key: DocumentKey) -> int:
    async with open_service(config, data, env, out, read_only=True) as service:
        try:
            version = await service.documents.version(key, args.version)
            content = version.content
        except AgentError as exc:
            raise CommandFailed(exc.message, exc.title) from None
    if args.json:
        out.json({**version.to_json_dict(), "type": key.value, "content": content})
    elif content:
        out.print(content, end="" if content.endswith("\n") else "\n")
    return EXIT_OK


def _report_save(args: argparse.Namespace, out: Output, key: DocumentKey, result: Any, not_kept: str | None,
                 chars: int) -> int:
    title = key.title.lower()
    if result.deferred:  # the remote signer did not sign: the warning above says why
        raise CommandFailed(f"the {title} ({chars:,} chars) is not signed yet: it is kept on this device and signed "
                            "and published when didactyl runs again and the remote signer answers", "Remote signer")
    if args.json:
        out.json(result.to_json_dict())
    else:
        out.print(f"saved the {title} ({chars:,} chars) as event {result.event_id}: {result.outcome.summary()}")
    if result.refused:
        raise CommandFailed(f"every relay refused the {title} for good: {result.outcome.summary()}; it is not "
                            "resent (your text is in the history); later saves are not affected")
    if not result.any_accepted and not_kept:
        raise CommandFailed(f"the {title} was not saved: {not_kept}; and no relay accepted it: "
                            f"{result.outcome.summary()}", "Not saved")
    if not result.any_accepted:
        raise CommandFailed(f"no relay accepted the {title}: {result.outcome.summary()}; it is kept in the outbox "
                            "and sent again whenever didactyl runs")
    if not_kept:
        out.warn(f"saved on the relays but not on this device: {not_kept}")
    return EXIT_OK


async def save(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
               key: DocumentKey, content: str) -> int:
    """Replace the document with ``content``: checked, then signed and published (the one save path)."""
    from ..service.types import NewerVersionKnown

    async with open_service(config, data, env, out) as service:
        try:
            result = await service.documents.save(key, content, encrypt=not getattr(args, "plain", False))
        except NewerVersionKnown as exc:  # another writer's newer version: nothing published
            raise CommandFailed(exc.message, exc.title) from None
        except AgentError as exc:  # bad input: nothing published
            raise UsageError(exc.message, exc.title) from None
        not_kept = service.documents.not_persisted(result.event_id)  # e.g. disk full: not in the outbox
    return _report_save(args, out, key, result, not_kept, len(content))


async def edit(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
               key: DocumentKey) -> int:
    """Open the document's text in $VISUAL/$EDITOR; save it when it changed (a refused edit stays in its file)."""
    from ..service.types import NewerVersionKnown

    editor = (env.get("VISUAL") or env.get("EDITOR") or "").strip()
    title = key.title.lower()
    if not editor:
        raise UsageError(f"set $VISUAL or $EDITOR to edit the {title} (or use the save command with --file PATH)")
    async with open_service(config, data, env, out) as service:
        before = service.documents.snapshot(key).content
        fd, name = tempfile.mkstemp(prefix=f"didactyl-{key.value}-", suffix=".txt", dir=data)  # 0600
        with open(fd, "w", encoding="utf-8") as f:
            f.write(before)
        try:
            code = (await asyncio.to_thread(subprocess.run, [*shlex.split(editor), name])).returncode
        except OSError as exc:
            raise CommandFailed(f"cannot run the editor {editor!r}: {exc.strerror or exc}") from None
        after = Path(name).read_text("utf-8")
        if code != 0 or after == before:
            Path(name).unlink(missing_ok=True)
            out.note(f"the {title} is unchanged" if code == 0 else f"the editor exited with {code}: nothing saved")
            return EXIT_OK
        try:
            result = await service.documents.save(key, after, encrypt=not getattr(args, "plain", False))
        except NewerVersionKnown as exc:
            raise CommandFailed(f"{exc.message} (your edit is kept in {name})", exc.title) from None
        except AgentError as exc:  # refused: the edited text stays in its file
            raise UsageError(f"{title} refused: {exc.message} (your edit is kept in {name})", exc.title) from None
        Path(name).unlink(missing_ok=True)
        not_kept = service.documents.not_persisted(result.event_id)
    return _report_save(args, out, key, result, not_kept, len(after))


async def status(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
                 keys: list[DocumentKey]) -> int:
    """Which version of each document every relay holds (read back by id); ``--fix`` sends lagging relays the
    newest."""
    from ..service.labels import when

    # Without --fix the command only looks: no background repair, no profile publish.
    async with open_service(config, data, env, out, read_only=not args.fix) as service:
        statuses = [await service.documents.status(key, bring_up_to_date=args.fix) for key in keys]
    if args.json:
        out.json({s.type.value: s.to_json_dict() for s in statuses})
    else:
        for st in statuses:
            newest = (f"newest {st.newest_event_id[:8]} ({when(st.newest_created_at)})"
                      if st.newest_event_id else "no version on any relay")
            out.print(f"{st.type.title}: {newest}")
            width = max((len(r.url) for r in st.relays), default=0)
            for relay in st.relays:
                line = f"  {relay.url.ljust(width)}  {relay.describe()}"
                if relay.lagging and relay.republished is None and st.newest_event_id:
                    line += f" (--fix would send {st.newest_event_id[:8]})"
                out.print(line)
            if st.brought_up_to_date:
                n = len(st.brought_up_to_date)
                out.print(f"  brought {n} lagging relay{'s' if n != 1 else ''} up to date")
            for pending in st.pending:
                out.print(f"  outbox: {pending.describe()}")
    if not any(s.any_reachable for s in statuses):
        raise CommandFailed("no relay answered: cannot tell which version each relay holds")
    return EXIT_OK


async def history(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
                  key: DocumentKey) -> int:
    """Every version seen here (own saves and other writers'), newest first: ids, times, sizes, notes."""
    from ..service.labels import when

    async with open_service(config, data, env, out, read_only=True) as service:
        versions = await service.documents.history(key)
        rows = [v.to_json_dict() for v in versions]
    if args.json:
        out.json({"type": key.value, "versions": rows})
        return EXIT_OK
    if not rows:
        out.note(f"(no {key.title.lower()} version seen yet)")
        return EXIT_OK
    for row in rows:
        mark = "*" if row["current"] else " "
        size = f"{row['chars']:,} chars" if row["chars"] is not None else f"cannot be read: {row['problem']}"
        note = f"  {row['note']}" if row["note"] else ""
        out.print(f"{mark} {row['event_id']}  {when(row['created_at'])}  {row['origin']:<6}  {size}{note}")
    return EXIT_OK


async def diff(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
               key: DocumentKey) -> int:
    """A unified diff of two versions (ids or prefixes; the newer defaults to the one in use)."""
    async with open_service(config, data, env, out, read_only=True) as service:
        newer = args.newer or service.documents.snapshot(key).event_id
        if newer is None:
            raise CommandFailed(f"the {key.title.lower()} has no version in use to compare with: give two ids")
        try:
            text = await service.documents.diff(key, args.older, newer)
        except AgentError as exc:
            raise CommandFailed(exc.message, exc.title) from None
    if args.json:
        out.json({"type": key.value, "older": args.older, "newer": newer, "diff": text})
    elif text:
        out.print(text, end="")
    else:
        out.note("(the two versions have the same text)")
    return EXIT_OK


async def rollback(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
                   key: DocumentKey) -> int:
    """Save an older version's text again, as a new version (history is never rewritten)."""
    from ..service.types import NewerVersionKnown

    async with open_service(config, data, env, out) as service:
        try:
            result = await service.documents.rollback(key, args.version_id)
        except NewerVersionKnown as exc:
            raise CommandFailed(exc.message, exc.title) from None
        except AgentError as exc:
            raise UsageError(exc.message, exc.title) from None
        not_kept = service.documents.not_persisted(result.event_id)
        chars = len(result.snapshot.content) if result.snapshot is not None else 0
    return _report_save(args, out, key, result, not_kept, chars)
