"""``didactyl acp``: the agent over the Agent Client Protocol on stdin/stdout, for an editor (Zed's ``agent_servers``,
toad). The service starts as for any command — the same key, relays, soul, memory and save path as the app — and
answers direct messages not at all (the app or ``serve`` does); stdout carries only the protocol, every warning goes
to stderr. docs/acp.md"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import cast

from ..config import Config
from .command import EXIT_OK, Output, open_service


async def serve_acp(config: Config, data: Path, env: Mapping[str, str], out: Output) -> int:
    from acp import run_agent
    from acp.interfaces import Agent

    from .acp_agent import DidactylAcpAgent

    async with open_service(config, data, env, out, mcp=True) as service:
        agent = DidactylAcpAgent(service)
        try:
            # The SDK's Agent protocol also lists the methods a client may call only when an agent advertises them
            # (fork, resume, list, modes, config options); its router calls each by keyword, looked up when asked
            # for. Ours implements those it advertises in initialize.
            await run_agent(cast(Agent, agent))
        finally:
            agent.close()
    return EXIT_OK
