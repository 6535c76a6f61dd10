"""An MCP server over streamable HTTP (the SDK fixture server served by uvicorn on loopback): its tools offered and
run like a program's; ``headers`` sent with ``${VAR}`` taken from our environment; a server that refuses us fails
alone, with the reason."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from mcp_support import FIXTURE
from relay_servers import free_port

from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.mcp.servers import McpServers
from didactyl_tui.config_mcp import McpConfig, McpServerConfig

TOKEN = "s3cret-token"


async def _listening(port: int, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.close()
            return


@pytest.fixture
async def http_server() -> AsyncIterator[str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(sys.executable, str(FIXTURE), "--http", str(port),
                                                env={**os.environ, "FIXTURE_TOKEN": TOKEN},
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await _listening(port, 60)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def test_an_http_server_with_its_headers_runs_and_one_without_is_refused(http_server: str) -> None:
    registry = build_base_registry()
    config = McpConfig(start_timeout_s=30, servers=[
        McpServerConfig(name="web", url=http_server, headers={"Authorization": "Bearer ${WEB_TOKEN}"}),
        McpServerConfig(name="nokey", url=http_server)])
    servers = McpServers(config, registry, {"WEB_TOKEN": TOKEN})
    servers.start()
    try:
        await asyncio.wait_for(servers.wait_started(), 120)
        states = {s.name: s for s in servers.statuses()}
        assert states["web"].state == "ready", states["web"]
        assert (await registry.call("web__echo", {"text": "over http"})).content == "echo: over http"
        assert registry.get("web__echo").origin == "MCP server web"  # type: ignore[union-attr]
        assert states["nokey"].state == "failed" and states["nokey"].reason, states["nokey"]
        assert "HTTP 401" in states["nokey"].reason, states["nokey"]  # the server's answer, not only the SDK's words
        assert not any(name.startswith("nokey__") for name in registry.names())
    finally:
        await servers.stop()
