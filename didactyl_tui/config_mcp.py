"""The config tables about tools from elsewhere and what may act on the world: ``[mcp]`` (MCP servers whose tools the
model is offered, docs/mcp.md) and ``[permissions]`` (the gate every tool that acts outside the agent's own documents
passes). Fields of :class:`~didactyl_tui.config.Config`, documented like every other table."""

from __future__ import annotations

from dataclasses import dataclass

from .config_setting import setting


@dataclass
class McpServerConfig:
    """One MCP server: a program started on this machine and spoken to over its stdin/stdout (``command``), or a
    streamable HTTP endpoint (``url``). Its tools are offered as ``<name>__<tool>``. docs/mcp.md"""

    name: str = setting("", "A short name (letters, digits, - and _; at most 24): the prefix of its tools' names and "
                            "what `--allow` and [permissions] allow name.")
    command: str = setting("", "The program to start (found on PATH), e.g. \"npx\" or \"uvx\". Empty: use url.")
    args: list[str] = setting([], "Its arguments.")
    env: dict[str, str] = setting({}, "Environment variables it is given; a value may name one of yours as ${VAR} "
                                      "($${ for a literal ${). Nothing else of your environment is passed on, "
                                      "besides the few a program needs to run (PATH, HOME, USER, LOGNAME, SHELL, "
                                      "TERM).")
    url: str = setting("", "A streamable HTTP endpoint (http:// or https://) instead of a command.")
    headers: dict[str, str] = setting({}, "HTTP headers sent to url (e.g. Authorization = \"Bearer ${TOKEN}\"; "
                                          "${VAR} as in env).")
    enabled: bool = setting(True, "false: keep the entry but do not start it.")


@dataclass
class McpConfig:
    """MCP servers whose tools the model is offered, after the built-in tools. Each is started in the background when
    the app starts; one that fails, hangs or dies is shown in the self pane with its reason and its tools are
    withdrawn. Every call of one of their tools asks first ([permissions]). docs/mcp.md"""

    start_timeout_s: float = setting(30.0, "Seconds a server has to start and list its tools; past it, it is "
                                           "stopped and shown as failed.", min=1, max=600)
    call_timeout_s: float = setting(60.0, "Seconds one tool call may take; past it the model is told so and the "
                                          "server is stopped as hung (its tools withdrawn).", min=1, max=3600)
    max_result_chars: int = setting(20_000, "Most characters of one tool result given to the model (the rest is "
                                            "cut, and the model told).", min=100, max=1_000_000)
    max_message_bytes: int = setting(4 * 1024 * 1024, "Most bytes of one message a server sends over stdio; a "
                                                      "larger one ends the server (shown failed, with the reason).",
                                     min=64 * 1024, max=256 * 1024 * 1024)
    max_tools_per_server: int = setting(64, "Most tools offered from one server (the rest are left out, said once).",
                                        min=1, max=1000)
    max_schema_chars: int = setting(16_000, "Most characters of one tool's description and input schema together; "
                                            "a larger tool is left out, with the reason.", min=200, max=1_000_000)
    servers: list[McpServerConfig] = setting([], "[[mcp.servers]] entries, in the order their tools are offered.")


@dataclass
class PermissionsConfig:
    """The gate before a tool acts outside the agent's own documents (an MCP server's tools, write_file, post_note):
    in the app the person is asked (allow once, always for this tool, or deny; \"always\" is kept in state.toml and
    revocable); with nobody to ask (a headless command, serve, a direct message) it is denied unless allowed here.
    A guest's conversation never gets them. docs/mcp.md"""

    allow: list[str] = setting([], "Tools that act without asking: a tool's name (\"post_note\", "
                                   "\"everything__echo\") or a server's tools (\"everything__*\"). `--allow NAME` adds "
                                   "to it for one command.")
    admin_dms: bool = setting(False, "Let the admin's own direct messages (and attach) use the tools allowed above "
                                     "(nobody is there to ask); false: those tools are refused in direct messages.")


MAX_SERVERS = 32
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def mcp_server_problem(servers: list[McpServerConfig]) -> tuple[str, str] | None:
    """(key, what is wrong) with ``[[mcp.servers]]``, or None: names unique and short, one of command or url."""
    if len(servers) > MAX_SERVERS:
        return "servers", f"lists {len(servers)} servers; at most {MAX_SERVERS}"
    seen: set[str] = set()
    for server in servers:
        name = server.name
        if not name or len(name) > 24 or not set(name) <= _NAME_CHARS or "__" in name:
            return "name", (f"{name[:40]!r} must be 1 to 24 letters, digits, - or _ (no double underscore): it "
                            "prefixes its tools' names")
        if name in seen:
            return "name", f"{name!r} names two servers"
        seen.add(name)
        if bool(server.command.strip()) == bool(server.url.strip()):
            return "command", f"server {name!r} needs either command or url (one of them)"
        if server.url and not server.url.startswith(("http://", "https://")):
            return "url", f"server {name!r}: {server.url[:100]!r} must start with http:// or https://"
    return None
