"""A small MCP server written with the official SDK, spoken to over stdio by the tests (tests/agent/tools/mcp/ and
the app's): ``python tests/mcp_fixture_server.py [--hang-at-start | --die-at-start]``.

Its tools: ``echo`` (the text back), ``add``, ``show_env`` (one variable of its environment, to check what a server is
given), ``shout`` (a long result with control characters and markup, to check results are bounded and cleaned),
``hang`` (never answers) and ``die`` (the process exits mid-call). ``--flood-at-start`` writes one line without end
on its stdout instead of answering (up to a GiB, unless it is stopped first), as a hostile server would.
``--http PORT`` serves the same tools over streamable HTTP instead."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

if "--hang-at-start" in sys.argv:
    time.sleep(3600)  # never answers initialize: the client's start bound must end it
if "--flood-at-start" in sys.argv:
    for _ in range(1024):
        os.write(1, b"x" * (1024 * 1024))
    sys.exit(0)
if "--die-at-start" in sys.argv:
    print("fixture: refusing to start (asked to)", file=sys.stderr, flush=True)
    sys.exit(3)

server = MCPServer("fixture")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def show_env(name: str) -> str:
    """One variable of this server's environment ("(unset)" when it has none)."""
    return os.environ.get(name, "(unset)")


@server.tool()
def shout(size: int) -> str:
    """A result of ``size`` characters with terminal escapes and markup in it."""
    unit = "[bold red]x[/]\x1b[31mX\x07"
    return (unit * (size // len(unit) + 1))[:size]


@server.tool()
def hang() -> str:
    """Never answers."""
    time.sleep(3600)
    return "never"


@server.tool()
def die() -> str:
    """The server exits mid-call."""
    os._exit(7)


def serve_http(port: int) -> None:
    """The same tools over streamable HTTP on 127.0.0.1:``port``, at /mcp; with ``$FIXTURE_TOKEN`` set, a request
    without ``Authorization: Bearer <token>`` is refused (401)."""
    import uvicorn
    from starlette.responses import PlainTextResponse

    app = server.streamable_http_app()
    token = os.environ.get("FIXTURE_TOKEN", "")

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and token and dict(scope["headers"]).get(b"authorization") != \
                f"Bearer {token}".encode():
            await PlainTextResponse("who are you?", status_code=401)(scope, receive, send)
            return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if "--http" in sys.argv:
        serve_http(int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        server.run("stdio")
