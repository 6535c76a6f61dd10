"""``didactyl sessions list|show|export|rename|delete``: the saved chats, for scripts.

These read the conversation database only: no key, no relay, no model (instant, and they work offline).
A session id may be shortened to a unique prefix (at least 4 characters), as ``git`` allows for commits.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ..errors import AgentError
from .command import EXIT_OK, Output
from .parser import CommandFailed, UsageError


def _info_json(info: Any) -> dict[str, Any]:
    return {"id": info.id, "title": info.title, "created_at": info.created_at, "updated_at": info.updated_at,
            "message_count": info.message_count}


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def _clean(text: str) -> str:
    """Text from the database reaches a terminal: no control characters (newlines and tabs kept)."""
    return "".join(ch for ch in text if ch in "\n\t" or (ch.isprintable()))


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if content:
        import json

        return json.dumps(content, ensure_ascii=False)
    calls = message.get("tool_calls") or ()
    return ", ".join(f"[tool call {c.get('function', {}).get('name', '')}]" for c in calls)


async def run(args: argparse.Namespace, data: Path, out: Output) -> int:
    from ..service.sessions import open_sessions

    sessions = open_sessions(data)
    try:
        return await _run(args, sessions, out)
    except AgentError as exc:  # an unknown id is bad input (exit 2); a database problem a failure (exit 1)
        error = UsageError if exc.message.startswith(("no conversation", "a chat's title")) else CommandFailed
        raise error(exc.message) if error is UsageError else error(exc.message, exc.title) from None
    finally:
        sessions.store.close()


async def _run(args: argparse.Namespace, sessions: Any, out: Output) -> int:
    action = args.sessions_command
    if action == "list":
        listed = await sessions.list(include_empty=args.all)
        if args.json:
            out.json([_info_json(s) for s in listed])
            return EXIT_OK
        for s in listed:
            title = _clean(" ".join(s.title.split())) or "(untitled)"
            out.print(f"{s.id}  {_stamp(s.updated_at)}  {s.message_count:>4} msgs  {title}")
        return EXIT_OK
    session_id = await sessions.resolve(args.session)
    if action == "show":
        info, messages = await sessions.info(session_id), await sessions.messages(session_id)
        if args.json:
            out.json({**_info_json(info), "messages": messages})
            return EXIT_OK
        out.print(f"# {_clean(info.title) or '(untitled)'}  ({info.id}, {info.message_count} messages)")
        for m in messages:
            status = f" [{m['status']}]" if m.get("status") else ""
            out.print(f"\n{m['role']}{status}:\n{_clean(_message_text(m))}")
        return EXIT_OK
    if action == "export":
        if args.json:
            import json

            info, messages = await sessions.info(session_id), await sessions.messages(session_id)
            text = json.dumps({**_info_json(info), "messages": messages}, ensure_ascii=False, indent=2) + "\n"
        else:
            text = await sessions.export_markdown(session_id)
        if args.output:
            _write_private(Path(args.output).expanduser(), text)
            out.stderr.write(f"wrote {args.output}\n")
        else:
            out.print(text, end="")
        return EXIT_OK
    if action == "rename":
        await sessions.rename(session_id, args.title)
        info = await sessions.info(session_id)
        if args.json:
            out.json(_info_json(info))
        else:
            out.print(f"{info.id}  {_clean(info.title)}")
        return EXIT_OK
    deleted = await sessions.delete(session_id)
    if args.json:
        out.json({"id": session_id, "deleted": deleted})
    else:
        out.print(f"deleted {session_id}")
    return EXIT_OK


def _write_private(path: Path, text: str) -> None:
    import os

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(path, 0o600)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
