"""``didactyl prompt``: the next prompt, assembled without calling the model (a dry run)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import AgentError
from .command import EXIT_OK, Output, open_service, resolve_session


def _render_prompt(assembly: Any) -> str:
    lines = [f"model: {assembly.model or '(none configured)'}",
             f"policy: {assembly.audience} ({assembly.audience_who})", ""]
    for layer in assembly.layers:
        source = f"tool {layer.tool}" if layer.tool else "static"
        if layer.skipped:
            lines.append(f"- {layer.section} [{layer.role}, {source}] skipped: {layer.skip_reason}")
        else:
            lines.append(f"- {layer.section} [{layer.role}, {source}] {layer.tokens} tokens")
    lines.append(f"- history: {len(assembly.history)} messages ({assembly.history_dropped} older left out)")
    if assembly.backend_id and assembly.backend_withheld:
        lines.append(f"- memory backend {assembly.backend_id} skipped: {assembly.backend_withheld}")
    elif assembly.backend_id:
        where = "in the system message" if assembly.backend_place == "system" else "after the history"
        lines.append(f"- memory backend {assembly.backend_id}: {assembly.backend_tokens} tokens ({where})")
    lines.append(f"- tools offered: {', '.join(assembly.tool_names)}")
    lines.append(f"- total: {assembly.total_tokens} tokens")
    lines.append("")
    for message in assembly.messages:
        lines.append(f"===== {message['role']} =====")
        lines.append(str(message.get("content") or ""))
    return "\n".join(lines)


async def prompt(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: Output,
                  message: str | None) -> int:
    from ..service.conversation import PROMPT_ELSEWHERE
    from ..service.live_policy import GuestTools, sender_turn

    # The MCP servers start too: their tools are part of what a turn offers (each server bounded in time).
    async with open_service(config, data, env, out, read_only=True, mcp=True) as service:
        agent_prompt = service.prompt
        if agent_prompt is None:  # attached: the agent's prompt comes with each of its replies
            raise AgentError(PROMPT_ELSEWHERE, "Attached")
        await service.mcp.wait_started()
        session = await resolve_session(service, args.session) if args.session else "dry-run"
        if args.as_sender:
            audience, tools = sender_turn(service.policy.rights, args.as_sender,
                                          GuestTools(agent_prompt.tool_names, out.warn))
            assembly = await agent_prompt.dry_run(session, message, audience=audience, tools=tools)
        else:
            assembly = await agent_prompt.dry_run(session, message)
        if args.json:
            out.json(assembly.to_json_dict())
        else:
            out.print(_render_prompt(assembly))
    return EXIT_OK
