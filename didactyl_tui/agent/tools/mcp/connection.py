"""One MCP server, spoken to with the official SDK: started (a program over stdio, or a streamable HTTP endpoint),
its tools listed, its tools called, stopped — each within a bound.

The SDK's transports and session are async context managers that must be entered and left in one task: a
:class:`McpConnection` owns that task, which opens them, says it is ready and waits to be stopped; calls come from
any task of the same loop. A server that does not start within ``start_timeout_s``, a call that takes more than
``call_timeout_s``, or a server that closes its end raise :class:`McpServerError` with a reason a person reads (the
last lines the server wrote on its stderr, cleaned and bounded, when it gave any). Its stderr never reaches the
terminal: it is read into a small ring of lines. Its environment is what the config lists (``${VAR}`` taken from
ours) and the few variables any program needs (:data:`INHERITED`): nothing else of ours, no API key, is passed on.
Over stdio each message is bounded (stdio.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import threading
from collections.abc import Mapping
from typing import IO, Any

from ....config_mcp import McpServerConfig
from ....errors import AgentError
from ....terminal_text import one_line
from .stdio import Transport, stdio_transport

STDERR_LINES = 12  # the last lines of a server's stderr kept for its reason
STDERR_LINE_CHARS = 300
INHERITED = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM")  # what any program needs to run, nothing more
MAX_LIST_PAGES = 20  # tools/list pages read at most (a server that pages forever is cut here)
_VAR = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # $${ is a literal ${


class McpServerError(AgentError):
    """A server did not start, did not answer within its bound, or went away; ``message`` says which and why."""

    title = "MCP server"


def expand(value: str, env: Mapping[str, str], where: str) -> str:
    """``value`` with each ``${VAR}`` replaced from ``env`` (``$${`` stays a literal ``${``); McpServerError naming a
    variable that is not set."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "${"
        if name not in env:
            raise McpServerError(f"{where} names ${{{name}}}, which is not set in the environment")
        return env[name]

    return _VAR.sub(one, value)


class _StderrRing:
    """A pipe the server writes its stderr into, read by a thread into the last :data:`STDERR_LINES` lines."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.writer: IO[str] = os.fdopen(write_fd, "w")
        self._reader = os.fdopen(read_fd, "rb")
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        threading.Thread(target=self._read, name="mcp-stderr", daemon=True).start()

    def _read(self) -> None:
        with self._reader:
            while True:
                line = self._reader.readline(64 * 1024)  # a line without an end is cut, never held whole
                if not line:
                    return
                text = one_line(line.decode("utf-8", "replace"))[:STDERR_LINE_CHARS]
                if text:
                    self.lines.append(text)

    def tail(self) -> str:
        return " / ".join(list(self.lines)[-3:])

    def close_writer(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.close()


class McpConnection:
    """One configured server. :meth:`start` → its tools (the SDK's ``Tool`` models); :meth:`call`; :meth:`stop`."""

    def __init__(self, server: McpServerConfig, env: Mapping[str, str], *, start_timeout_s: float,
                 call_timeout_s: float, max_message_bytes: int = 4 * 1024 * 1024) -> None:
        self.config, self._env = server, dict(env)
        self.start_timeout_s, self.call_timeout_s = start_timeout_s, call_timeout_s
        self.max_message_bytes = max_message_bytes
        self._pipe = Transport()
        self._session: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stderr: _StderrRing | None = None
        self.closed_reason: str | None = None  # set once the connection ended (died, stopped)
        self._http_refusal: str | None = None  # an HTTP server's last error status ("HTTP 401 Unauthorized")

    @property
    def name(self) -> str:
        return self.config.name

    def _reason(self, what: str) -> str:
        if self._pipe.problem:
            what = self._pipe.problem
        if self._http_refusal:  # the SDK says only "Server returned an error response"
            what = f"the server answered {self._http_refusal} ({what})"
        tail = self._stderr.tail() if self._stderr is not None else ""
        return f"{what} (it said: {tail})" if tail else what

    def _transport(self) -> Any:
        server, where = self.config, f"[[mcp.servers]] {self.config.name!r}"
        if server.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = {k: expand(v, self._env, f"{where} headers.{k}") for k, v in server.headers.items()}
            client = create_mcp_http_client(headers=headers)
            client.event_hooks["response"].append(self._note_refusal)
            return _http(streamable_http_client, client, server.url)
        env = {k: self._env[k] for k in INHERITED if k in self._env}
        env.update({k: expand(v, self._env, f"{where} env.{k}") for k, v in server.env.items()})
        self._stderr = _StderrRing()
        return stdio_transport(server.command, server.args, env, self._stderr.writer, self.max_message_bytes,
                               self._pipe)

    async def _note_refusal(self, response: Any) -> None:
        """(httpx's response hook.) The status of the last message we sent, when it was refused, is kept for the
        reason a failure gives: status and reason phrase only, cleaned (nothing of the body, which may echo what we
        sent). Only POSTs, which carry our messages: a server without the optional GET stream answers it 405."""
        if response.request.method != "POST":
            return
        if response.status_code < 400:
            self._http_refusal = None
            return
        phrase = one_line(str(response.reason_phrase or ""))[:60]
        self._http_refusal = f"HTTP {response.status_code}" + (f" {phrase}" if phrase else "")

    async def start(self) -> list[Any]:
        """Start the server and list its tools, within ``start_timeout_s``; McpServerError otherwise."""
        ready: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # read here when nobody waits any more
        transport = self._transport()  # a ${VAR} that is not set: raised here, nothing started
        self._owner = asyncio.create_task(self._own(transport, ready), name=f"mcp-{self.name}")
        try:
            async with asyncio.timeout(self.start_timeout_s):
                return await asyncio.shield(ready)
        except TimeoutError:
            await self.stop()
            raise McpServerError(self._reason(f"did not start within {self.start_timeout_s:g} s")) from None
        except McpServerError:
            await self.stop()
            raise

    async def _own(self, transport: Any, ready: asyncio.Future[list[Any]]) -> None:
        from mcp import ClientSession
        from mcp.types import Implementation

        try:
            async with transport as (read, write), ClientSession(
                    read, write, client_info=Implementation(name="didactyl", version="0")) as session:
                await session.initialize()
                tools = await _list_tools(session)
                self._session = session
                ready.set_result(tools)
                await self._stop.wait()
            self.closed_reason = self.closed_reason or "stopped"
        except asyncio.CancelledError:
            self.closed_reason = self.closed_reason or "stopped"
            if not ready.done():
                ready.set_exception(McpServerError(self._reason("stopped before it started")))
        except BaseException as exc:
            reason = self._reason(_exception_words(exc))
            self.closed_reason = reason
            if not ready.done():
                ready.set_exception(McpServerError(reason))
        finally:
            self._session = None
            if self._stderr is not None:
                self._stderr.close_writer()

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Call ``tool`` with ``arguments`` → the SDK's ``CallToolResult``; McpServerError when the server is gone,
        fails to answer, or takes longer than ``call_timeout_s`` (then it is stopped: a hung server holds nothing)."""
        session = self._session
        if session is None:
            raise McpServerError(self.closed_reason or "not started")
        try:
            async with asyncio.timeout(self.call_timeout_s):
                return await session.call_tool(tool, arguments)
        except TimeoutError:
            self.closed_reason = self._reason(f"did not answer a call of {tool} within {self.call_timeout_s:g} s")
            await self.stop()
            raise McpServerError(self.closed_reason) from None
        except Exception as exc:  # the SDK's MCPError (connection closed, a protocol error) and the transport's
            from mcp.shared.exceptions import MCPError
            from mcp.types import CONNECTION_CLOSED

            if self._session is None or not isinstance(exc, MCPError) or exc.code == CONNECTION_CLOSED:
                self.closed_reason = self._reason(_exception_words(exc))
                await self.stop()
                raise McpServerError(self.closed_reason) from None
            raise McpServerError(f"{tool}: {_exception_words(exc)}") from None

    @property
    def alive(self) -> bool:
        return self._session is not None and self._owner is not None and not self._owner.done()

    async def closed(self) -> None:
        """Until the connection has ended (stopped, or the server went away)."""
        owner = self._owner
        if owner is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(owner)

    async def stop(self) -> None:
        """Stop the server (its program is ended by the SDK, within its own bounds); idempotent."""
        owner = self._owner
        if owner is None or owner.done():
            return
        self._stop.set()
        try:
            async with asyncio.timeout(self.start_timeout_s):
                await asyncio.shield(owner)
        except TimeoutError:
            owner.cancel()
            with contextlib.suppress(BaseException):
                await owner
        except BaseException:
            pass


@contextlib.asynccontextmanager
async def _http(open_client: Any, http_client: Any, url: str) -> Any:
    async with http_client, open_client(url, http_client=http_client) as streams:
        yield streams


async def _list_tools(session: Any) -> list[Any]:
    from mcp.types import PaginatedRequestParams

    tools: list[Any] = []
    cursor = None
    for _ in range(MAX_LIST_PAGES):
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _exception_words(exc: BaseException) -> str:
    """One line for an exception from the SDK, the transport or the program (an exception group: its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"cannot start it: {exc.filename or 'the command'} was not found"
    words = one_line(str(exc))[:300]
    return words or type(exc).__name__
