"""Tools from MCP servers (the official SDK): :mod:`.connection` speaks to one server within bounds,
:mod:`.servers` starts the configured ones and keeps their tools in the one registry, :mod:`.results` makes what a
server gives fit for the model and the screen. docs/mcp.md"""
