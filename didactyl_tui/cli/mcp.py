"""``didactyl mcp list`` and ``didactyl mcp test NAME``: the configured MCP servers started as the app starts them,
what each offers, and (``test --call TOOL``) one call as a headless command makes it: denied unless allowed by
``[permissions] allow`` or ``--allow``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping

from ..config import Config
from ..terminal_text import clean, one_line
from .command import EXIT_FAILED, EXIT_OK, Output
from .parser import UsageError


async def run(args: argparse.Namespace, config: Config, env: Mapping[str, str], out: Output) -> int:
    from ..service.mcp_check import check_mcp

    only = args.server if args.mcp_command == "test" else None
    call = getattr(args, "call", None)
    arguments = None
    if call is not None:
        try:
            arguments = json.loads(args.arguments or "{}")
        except ValueError as exc:
            raise UsageError(f"--arguments is not JSON: {exc}") from None
        if not isinstance(arguments, dict):
            raise UsageError("--arguments must be a JSON object")
    if not config.mcp.servers:
        out.note("no MCP server is configured ([[mcp.servers]] in the config; docs/mcp.md)")
        return EXIT_OK if args.mcp_command == "list" else EXIT_FAILED
    check = await check_mcp(config, env, only=only, call=call, arguments=arguments, allow=getattr(args, "allow", ()))
    failed = [s for s in check.statuses if s.state == "failed"]
    if args.json:
        out.json({
            "servers": [{"name": s.name, "state": s.state, "reason": s.reason, "tools": list(s.tools),
                         "left_out": list(s.left_out)} for s in check.statuses],
            "tools": [{"name": n, "origin": o, "description": d} for n, o, d in check.tools],
            "call": None if check.call is None else {
                "name": check.call.name, "result": check.call.content, "error": check.call.is_error,
                "refused": check.call.refused, "permission": check.call.permission},
        })
    else:
        for status in check.statuses:
            out.print(one_line(status.line))
            for why in status.left_out:
                out.print(f"  left out: {one_line(why)}")
        for name, _origin, description in check.tools:
            out.print(f"  {name} — {one_line(description)[:160]}")
        if check.call is not None:
            out.print(f"{check.call.name}: {check.call.permission or 'ran'}")
            out.print(clean(check.call.content))
    if failed or (check.call is not None and check.call.is_error):
        return EXIT_FAILED
    return EXIT_OK
