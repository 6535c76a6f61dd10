"""The MCP servers without the rest of the agent (no key, no relay): ``didactyl mcp list`` and ``didactyl mcp test``
start the configured servers as the app does, list what each offers and, for a test, call one tool through the
permission gate as a headless command would (denied unless ``[permissions] allow`` or ``--allow`` allows it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..agent.tools.mcp.servers import McpServers, McpServerStatus
from ..agent.tools.permission import Where
from ..agent.tools.registry import ToolOutcome, ToolRegistry
from ..config import Config
from ..errors import AgentError
from .permissions import gated, permission_gate


@dataclass
class McpCheck:
    statuses: list[McpServerStatus]
    tools: list[tuple[str, str, str]] = field(default_factory=list)  # (name, origin, description)
    call: ToolOutcome | None = None


async def check_mcp(config: Config, env: Mapping[str, str], *, only: str | None = None, call: str | None = None,
                    arguments: dict[str, Any] | None = None, allow: Iterable[str] = ()) -> McpCheck:
    """Start the servers (``only``: that one; AgentError when no server has that name), list their tools, call
    ``call`` (``<server>__<tool>`` or the server's own name for it) as a headless command would, stop them."""
    names = [s.name for s in config.mcp.servers]
    if only is not None and only not in names:
        raise AgentError(f"no MCP server is called {only!r} (configured: {', '.join(names) or 'none'})", "MCP")
    registry = ToolRegistry()
    servers = McpServers(config.mcp, registry, env)
    servers.start(only)
    try:
        await servers.wait_started()
        check = McpCheck([s for s in servers.statuses() if only is None or s.name == only],
                         [(t.name, t.origin, t.description) for t in registry.visible()])
        if call is not None:
            name = call if "__" in call or only is None else f"{only}__{call}"
            gate = permission_gate(config, allow)
            check.call = await gated(gate, registry, name, arguments or {}, Where.NOBODY,
                                     lambda: registry.call(name, arguments or {}))
        return check
    finally:
        await servers.stop()
