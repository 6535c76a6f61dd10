"""``didactyl soul show|publish``: the agent's soul (its kind 31120 event) from the command line."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import AgentError, ConfigError
from . import EXIT_OK, CommandFailed, UsageError, _Out, _read_file, _service


def _printable(text: str) -> str:
    return "".join(ch for ch in " ".join(text.split()) if ch.isprintable())


async def show(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: _Out) -> int:
    async with _service(config, data, env, out) as service:
        view = service.soul_view()
    if args.json:
        out.json(view.to_json_dict())
        return EXIT_OK
    where = f"event {view.event_id} ({'encrypted' if view.encrypted else 'plain'})" if view.event_id else \
        f"{view.template.source} (not on the relays)"
    out.print(f"soul from {where}")
    for sec in view.template.sections:
        source = f"tool {sec.tool}" if sec.tool else f"content: {_printable(sec.content or '')[:80]}"
        out.print(f"- {_printable(sec.section)} [{sec.role}] {source}")
    return EXIT_OK


def read_soul_file(path: str, text: str) -> Any:
    from ..service import read_soul_text

    try:
        return read_soul_text(path, text)
    except (AgentError, ConfigError) as exc:
        raise UsageError(exc.message, "Bad soul") from None


async def publish(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: _Out,
                  stdin: Any) -> int:
    from ..service import SoulLintError

    template = read_soul_file(args.file, _read_file(args.file, stdin)) if args.file else None
    async with _service(config, data, env, out) as service:
        try:
            outcome = await service.publish_soul(template, encrypt=not args.plain)
        except SoulLintError as exc:  # nothing published
            raise UsageError(f"soul refused: {exc.message}", exc.title) from None
        except AgentError as exc:  # a newer soul is known: nothing published
            raise CommandFailed(exc.message, exc.title) from None
        view = service.soul_view()
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


async def history(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: _Out) -> int:
    from ..service import when

    async with _service(config, data, env, out) as service:
        versions = await service.soul_history()
    if args.json:
        out.json({"versions": [v.to_json_dict() for v in versions]})
        return EXIT_OK
    if not versions:
        out.stderr.write("(no version of the soul seen yet)\n")
    for v in versions:
        mark = "*" if v.current else " "
        what = ", ".join(_printable(n) for n in v.sections) if v.sections is not None else _printable(v.problem)
        out.print(f"{mark} {v.event_id}  {when(v.created_at)}  {v.origin:<5}  {what}")
    return EXIT_OK


async def edit(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: _Out) -> int:
    """Open the soul in use (its JSON document) in $VISUAL/$EDITOR; publish it when it changed."""
    import asyncio
    import json
    import shlex
    import subprocess
    import tempfile

    editor = (env.get("VISUAL") or env.get("EDITOR") or "").strip()
    if not editor:
        raise UsageError("set $VISUAL or $EDITOR to edit the soul (or use: didactyl soul publish --file PATH)")
    async with _service(config, data, env, out) as service:
        before = json.dumps(service.soul_view().to_json_dict()["soul"], ensure_ascii=False, indent=1) + "\n"
        fd, name = tempfile.mkstemp(prefix="didactyl-soul-", suffix=".json", dir=data)  # 0600
        with open(fd, "w", encoding="utf-8") as f:
            f.write(before)
        try:
            code = (await asyncio.to_thread(subprocess.run, [*shlex.split(editor), name])).returncode
        except OSError as exc:
            raise CommandFailed(f"cannot run the editor {editor!r}: {exc.strerror or exc}") from None
        after = Path(name).read_text("utf-8")
        if code != 0 or after == before:
            Path(name).unlink(missing_ok=True)
            out.stderr.write("the soul is unchanged\n" if code == 0 else f"the editor exited with {code}: "
                             "nothing published\n")
            return EXIT_OK
        try:
            outcome = await service.publish_soul(read_soul_file(name, after), encrypt=not args.plain)
        except (UsageError, AgentError) as exc:  # refused: the edited text stays in its file
            raise UsageError(f"soul refused: {exc.message} (your edit is kept in {name})", "Bad soul") from None
        Path(name).unlink(missing_ok=True)
        out.print(f"published the soul as event {service.soul_view().event_id}: {outcome.summary()}")
    if not outcome.any_accepted:
        raise CommandFailed("no relay accepted the soul yet; it is kept in the outbox and sent again whenever "
                            "didactyl runs")
    return EXIT_OK
