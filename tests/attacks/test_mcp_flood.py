"""A hostile MCP server: a message that never ends on its stdout is cut at [mcp] max_message_bytes — the server is
ended and shown failed with the reason — instead of being read into memory whole."""

from __future__ import annotations

import asyncio

from mcp_support import fixture_server

from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.mcp.servers import McpServers
from didactyl_tui.config_mcp import McpConfig


async def test_a_line_without_end_is_cut_at_the_bound_and_the_server_ended() -> None:
    registry = build_base_registry()
    config = McpConfig(max_message_bytes=64 * 1024, start_timeout_s=60,
                       servers=[fixture_server("flood", "--flood-at-start"), fixture_server("fine")])
    servers = McpServers(config, registry, {})
    servers.start()
    try:
        await asyncio.wait_for(servers.wait_started(), 120)
        states = {s.name: s for s in servers.statuses()}
        assert states["flood"].state == "failed", states["flood"]
        assert "sent a message over 65,536 bytes ([mcp] max_message_bytes)" in states["flood"].reason
        assert states["fine"].state == "ready" and "fine__echo" in registry  # the other one is untouched
    finally:
        await servers.stop()
