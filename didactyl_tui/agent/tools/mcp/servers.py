"""The configured MCP servers and their tools in the one tool registry.

:class:`McpServers` starts every ``[[mcp.servers]]`` entry in the background (each within ``start_timeout_s``), and
registers the tools of those that started as ``<server>__<tool>`` — after the built-in tools (registered first), in
the config's order of servers, so the memory backend's, offered after the registry's, come last. Each tool
``acts`` (the permission gate asks before it runs) and names its server (``origin``: the inspector shows it). A server
that fails to start, hangs in a call or goes away is shown with its reason (:meth:`statuses`, and the listeners told)
and its tools are withdrawn at once: a turn is never held by it beyond ``call_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ....config_mcp import McpConfig, McpServerConfig
from ..registry import Tool, ToolError, ToolRegistry
from .connection import McpConnection, McpServerError
from .results import description_of, result_text, schema_of, tool_name


@dataclass(frozen=True, slots=True)
class McpServerStatus:
    """One server as a person sees it: ``state`` starting, ready, failed, stopped or disabled."""

    name: str
    state: str
    reason: str = ""
    tools: tuple[str, ...] = ()  # the tool names offered (``<server>__<tool>``)
    left_out: tuple[str, ...] = ()  # tools not offered, each with why

    @property
    def line(self) -> str:
        """One line for the self pane and ``didactyl mcp list``."""
        if self.state == "ready":
            extra = f"; {len(self.left_out)} left out" if self.left_out else ""
            return f"{self.name}: ready, {len(self.tools)} tools{extra}"
        return f"{self.name}: {self.state}" + (f" — {self.reason}" if self.reason else "")


class McpServers:
    """The servers of ``[mcp]``; their tools go into ``registry``."""

    def __init__(self, config: McpConfig, registry: ToolRegistry, env: Mapping[str, str]) -> None:
        self.config, self._registry, self._env = config, registry, dict(env)
        self._servers = list(config.servers)  # the config's, then those added while running (an ACP client's)
        self._status: dict[str, McpServerStatus] = {
            s.name: McpServerStatus(s.name, "starting" if s.enabled else "disabled") for s in config.servers}
        self._connections: dict[str, McpConnection] = {}
        self._tools: dict[str, list[Tool]] = {}  # by server, in its order
        self._tasks: set[asyncio.Task[Any]] = set()
        self._listeners: list[Callable[[McpServerStatus], object]] = []
        self._started = asyncio.Event()  # set while no start is under way
        self._started.set()
        self._stopping = False

    # --- what a person sees -----------------------------------------------------------------------
    def statuses(self) -> list[McpServerStatus]:
        return list(self._status.values())

    def add_listener(self, cb: Callable[[McpServerStatus], object]) -> Callable[[], None]:
        """``cb(status)`` whenever a server's state changes; the returned function withdraws it."""
        self._listeners.append(cb)

        def withdraw() -> None:
            if cb in self._listeners:
                self._listeners.remove(cb)

        return withdraw

    def _set(self, status: McpServerStatus) -> None:
        self._status[status.name] = status
        for cb in list(self._listeners):
            cb(status)

    # --- starting and stopping ------------------------------------------------------------------
    def start(self, only: str | None = None) -> None:
        """Start every enabled server (or ``only`` that one) in the background; :meth:`wait_started` waits."""
        servers = [s for s in self._servers if s.enabled and (only is None or s.name == only)]
        if not servers:
            self._started.set()
            return
        self._started.clear()
        task = asyncio.create_task(self._start_all(servers), name="mcp-start")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def add(self, server: McpServerConfig) -> McpServerStatus:
        """Start one more server while running (an ACP client's, at ``session/new``), named apart from the others
        (its name cleaned to what a config name may be, and numbered when taken); its status once started or failed
        (bounded by ``start_timeout_s``)."""
        base = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in server.name)
        base = base.replace("__", "_")[:20] or "server"
        name, n = base, 1
        while name in self._status:
            n += 1
            name = f"{base}-{n}"
        server = dataclasses.replace(server, name=name, enabled=True)
        self._servers.append(server)
        self._status[name] = McpServerStatus(name, "starting")
        await self._start_one(server)
        return self._status[name]

    async def wait_started(self) -> None:
        """Until every server being started has started or failed (each is bounded by ``start_timeout_s``); at once
        when none is being started."""
        await self._started.wait()

    async def _start_all(self, servers: list[McpServerConfig]) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                for server in servers:
                    tg.create_task(self._start_one(server))
        finally:
            self._started.set()

    async def _start_one(self, server: McpServerConfig) -> None:
        self._set(McpServerStatus(server.name, "starting"))
        connection = McpConnection(server, self._env, start_timeout_s=self.config.start_timeout_s,
                                   call_timeout_s=self.config.call_timeout_s,
                                   max_message_bytes=self.config.max_message_bytes)
        self._connections[server.name] = connection
        try:
            listed = await connection.start()
        except McpServerError as exc:
            self._set(McpServerStatus(server.name, "failed", exc.message))
            return
        tools, left_out = self._tools_of(connection, listed)
        self._tools[server.name] = tools
        self._offer()
        self._set(McpServerStatus(server.name, "ready", tools=tuple(t.name for t in tools), left_out=left_out))
        watcher = asyncio.create_task(self._watch(connection), name=f"mcp-watch-{server.name}")
        self._tasks.add(watcher)
        watcher.add_done_callback(self._tasks.discard)

    async def _watch(self, connection: McpConnection) -> None:
        """A server that goes away by itself (its program ended) is shown failed, its tools withdrawn."""
        await connection.closed()
        if not self._stopping:
            self._withdraw(connection.name, connection.closed_reason or "it went away")

    def _withdraw(self, server: str, reason: str) -> None:
        if self._status.get(server, McpServerStatus(server, "")).state == "failed":
            return
        self._tools.pop(server, None)
        self._offer()
        self._set(McpServerStatus(server, "failed", f"{reason}; its tools are withdrawn"))

    async def stop(self) -> None:
        """Stop every server (bounded by each one's own stop) and withdraw their tools."""
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await asyncio.gather(*(c.stop() for c in self._connections.values()), return_exceptions=True)
        self._tools.clear()
        self._offer()
        for name, status in list(self._status.items()):
            if status.state in ("ready", "starting"):
                self._status[name] = McpServerStatus(name, "stopped")

    # --- the tools ------------------------------------------------------------------------------
    def _offer(self) -> None:
        """The registry holds exactly the tools of the servers that are up, in the config's order of servers."""
        registry = self._registry
        for tool in [t for t in registry.all() if t.family == "mcp"]:
            registry.unregister(tool.name)
        for server in self._servers:
            for tool in self._tools.get(server.name, ()):
                if tool.name not in registry:
                    registry.register(tool)

    def _tools_of(self, connection: McpConnection, listed: list[Any]) -> tuple[list[Tool], tuple[str, ...]]:
        limits, server = self.config, connection.name
        tools: list[Tool] = []
        left_out: list[str] = []
        names: set[str] = set()
        for remote in listed:
            name = tool_name(server, str(remote.name))
            schema = schema_of(remote)
            description = description_of(remote, server)
            if len(tools) >= limits.max_tools_per_server:
                left_out.append(f"{name}: past [mcp] max_tools_per_server")
            elif schema is None:
                left_out.append(f"{name}: its input schema is not a JSON object schema")
            elif len(description) + len(json.dumps(schema, default=str)) > limits.max_schema_chars:
                left_out.append(f"{name}: description and schema over [mcp] max_schema_chars")
            elif name in names or self._taken(name):
                left_out.append(f"{name}: the name is taken")
            else:
                names.add(name)
                tools.append(Tool(name, description, schema, self._handler(connection, str(remote.name)),
                                  family="mcp", origin=f"MCP server {server}", acts=True))
        return tools, tuple(left_out)

    def _taken(self, name: str) -> bool:
        """A tool of ours (not a server's) has this name."""
        tool = self._registry.get(name)
        return tool is not None and tool.family != "mcp"

    def _handler(self, connection: McpConnection, remote: str) -> Callable[..., Any]:
        async def call(**arguments: Any) -> str:
            try:
                result = await connection.call(remote, arguments)
            except McpServerError as exc:
                if not connection.alive:
                    self._withdraw(connection.name, exc.message)
                raise ToolError(f"MCP server {connection.name}: {exc.message}") from None
            text, failed = result_text(result, self.config.max_result_chars)
            if failed:
                raise ToolError(f"{connection.name} says: {text or 'the call failed'}")
            return text

        return call
