"""``didactyl chat``: one turn, its reply streamed to stdout (or printed as JSON)."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from ..config import Config
from ..terminal_text import StreamCleaner
from .command import EXIT_OK, Output, open_service, resolve_session
from .parser import CommandFailed


async def chat(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
                message: str) -> int:
    from ..service.types import (
        SessionKind,
        TextDelta,
        ToolCallFinished,
        ToolCallStarted,
        TurnFailed,
        TurnFinished,
        TurnStarted,
    )

    kind = SessionKind.EPHEMERAL_CHAT if args.ephemeral else SessionKind.HEADLESS_CHAT
    async with open_service(config, data, env, out, allow_tools=args.allow, mcp=True) as service:
        await service.mcp.wait_started()  # its tools are offered to this turn (each server bounded in time)
        if args.session:
            session = await resolve_session(service, args.session)
        else:  # an ephemeral turn's session is never stored: a fresh id nobody can continue
            session = uuid.uuid4().hex if args.ephemeral else await service.chat.new_session()
        assembly = None
        finished: TurnFinished | None = None
        streamed = False
        cleaner = StreamCleaner()
        stall = StallNotice(out, config.llm.stall_notice_s)
        watching = asyncio.create_task(stall.watch())
        try:
            async for event in service.chat.run_turn(session, message, kind):
                stall.heard(started=isinstance(event, ToolCallStarted), finished=isinstance(event, ToolCallFinished))
                if isinstance(event, TurnStarted):
                    assembly = event.assembly
                elif isinstance(event, TextDelta) and not args.json:
                    out.stream(cleaner, event.text)
                    streamed = True
                elif isinstance(event, TurnFailed):
                    if not args.session and not args.ephemeral:  # a new chat whose only turn failed is not kept
                        await service.chat.sessions.delete(session)
                    raise CommandFailed(event.message, event.title)
                elif isinstance(event, TurnFinished):
                    finished = event
        finally:
            watching.cancel()
        if finished is None:
            raise CommandFailed("the turn ended without a reply")
        if args.json:
            out.json({
                "session_id": None if args.ephemeral and not args.session else session,
                "ephemeral": bool(args.ephemeral),
                "reply": finished.reply,
                "tool_calls": [{"name": c.name, "arguments": c.arguments, "result": c.result, "ending": c.ending}
                               for c in finished.tool_calls],
                "prompt": assembly.to_json_dict() if assembly is not None else None,
                "cut": finished.cut,
            })
        elif streamed:
            out.print(cleaner.flush())
        else:
            out.print(finished.reply)
        if finished.cut:  # a bound ended the turn early: the reply is partial (and marked so)
            out.warn(f"reply cut short: {finished.cut}")
    return EXIT_OK


class StallNotice:
    """A stream that stalls says so on stderr (stdout carries only the reply): after ``[llm] stall_notice_s`` with no
    word from the model and no tool running, one line with the time waited and how to stop; once per silence."""

    def __init__(self, out: Output, after_s: float) -> None:
        self.out, self.after_s = out, after_s
        self.heard_at = time.monotonic()
        self.running_tools = 0  # a tool's silence is not the model's
        self.told = False

    def heard(self, *, started: bool, finished: bool) -> None:
        self.heard_at, self.told = time.monotonic(), False
        self.running_tools = max(0, self.running_tools + started - finished)

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.after_s / 2))
            quiet = time.monotonic() - self.heard_at
            if not self.told and not self.running_tools and quiet >= self.after_s:
                self.told = True
                self.out.note(f"didactyl: no word from the model for {quiet:.0f} s; still waiting (Ctrl+C stops)")
