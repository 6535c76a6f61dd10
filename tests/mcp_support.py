"""MCP servers for tests: the small SDK server in tests/mcp_fixture_server.py (always there), and the reference
``@modelcontextprotocol/server-everything`` on node (tests/mcp_everything/, installed with ``npm ci`` the first time;
``everything_server`` skips with the reason when node or npm is missing or the install fails)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from didactyl_tui.config_mcp import McpServerConfig

FIXTURE = Path(__file__).parent / "mcp_fixture_server.py"
EVERYTHING_DIR = Path(__file__).parent / "mcp_everything"
EVERYTHING_JS = EVERYTHING_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
INSTALL_TIMEOUT_S = 300


def fixture_server(name: str = "fx", *flags: str, env: dict[str, str] | None = None) -> McpServerConfig:
    """The SDK fixture server over stdio (``--hang-at-start``, ``--die-at-start``)."""
    return McpServerConfig(name=name, command=sys.executable, args=[str(FIXTURE), *flags], env=dict(env or {}))


def fixture_toml(name: str = "fx", *flags: str) -> str:
    """The same as a ``[[mcp.servers]]`` entry of a config file."""
    args = ", ".join(f'"{a}"' for a in (str(FIXTURE), *flags))
    return f'[[mcp.servers]]\nname = "{name}"\ncommand = "{sys.executable}"\nargs = [{args}]\n'


@pytest.fixture(scope="session")
def everything_server() -> McpServerConfig:
    """``server-everything`` over stdio on node; skipped with the reason when it cannot be had."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for @modelcontextprotocol/server-everything; not installed")
    if not EVERYTHING_JS.exists():
        try:
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"], cwd=EVERYTHING_DIR,
                                  capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm ci for server-everything took over {INSTALL_TIMEOUT_S}s (no registry reachable?)")
        if done.returncode != 0 or not EVERYTHING_JS.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"could not install @modelcontextprotocol/server-everything with npm ci: {last}")
    return McpServerConfig(name="everything", command=node, args=[str(EVERYTHING_JS), "stdio"])
