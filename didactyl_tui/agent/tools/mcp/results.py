"""What an MCP server gives, made fit for the model and the screen: a tool's name as ``<server>__<tool>`` (bounded,
only the characters model APIs accept), its description cleaned, and a call's result as text — control characters
and escape sequences removed, images and audio named instead of inlined, cut at a bound with the model told so."""

from __future__ import annotations

import json
import re
from typing import Any

from ....terminal_text import clean

MAX_TOOL_NAME = 64  # OpenAI's and Anthropic's bound on a function's name
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """``<server>__<tool>``, each character outside ``[A-Za-z0-9_-]`` made ``_``, cut to :data:`MAX_TOOL_NAME`."""
    return f"{server}__{_NOT_NAME.sub('_', tool)}"[:MAX_TOOL_NAME]


def description_of(tool: Any, server: str) -> str:
    """The description the model reads: the server's words, cleaned, after where it comes from."""
    words = clean(tool.description or tool.title or "", tabs=False).strip()
    return f"[MCP server {server}] {words}" if words else f"[MCP server {server}] {clean(tool.name)}"


def schema_of(tool: Any) -> dict[str, Any] | None:
    """The tool's input schema as given (None when it is not a JSON object schema)."""
    schema = tool.input_schema
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return None
    return schema


def _part(item: Any) -> str:
    kind = getattr(item, "type", "")
    if kind == "text":
        return item.text
    if kind in ("image", "audio"):
        size = len(getattr(item, "data", "") or "") * 3 // 4
        return f"[{kind} ({getattr(item, 'mime_type', '?')}, {size:,} bytes) not shown]"
    if kind == "resource_link":
        return f"[resource {getattr(item, 'uri', '')}]"
    if kind == "resource":
        resource = item.resource
        text = getattr(resource, "text", None)
        return text if isinstance(text, str) else f"[resource {getattr(resource, 'uri', '')} (binary) not shown]"
    return f"[{kind or 'unknown'} content not shown]"


def result_text(result: Any, max_chars: int) -> tuple[str, bool]:
    """(the text the model reads, whether the server said the call failed) for a ``CallToolResult``."""
    parts = [_part(item) for item in (result.content or [])]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = clean("\n".join(parts))
    if len(text) > max_chars:
        more = len(text) - max_chars
        text = text[:max_chars] + f"\n[cut: {more:,} more characters not shown ([mcp] max_result_chars)]"
    return text, bool(result.is_error)
