"""A unified diff's lines coloured for reading (theme variables only): the diff screens, a tool call's change in the
conversation and in the inspector. Its text comes from relays and the model, so it is cleaned first and never read
as markup."""

from __future__ import annotations

import json
from typing import Any

from textual.content import Content

from ...terminal_text import clean


def line_style(line: str) -> str:
    """The theme style of one unified-diff line ("" for context)."""
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("\\ "):  # "\ No newline at end of file"
        return "$text-muted"
    if line.startswith("@@"):
        return "$text-accent"
    if line.startswith("+"):
        return "$text-success"
    if line.startswith("-"):
        return "$text-error"
    return ""


def diff_lines_content(lines: list[str]) -> Content:
    parts: list[Content] = []
    for line in lines:
        line = clean(line, newlines=False)
        style = line_style(line)
        parts.append(Content.styled(line or " ", style) if style else Content(line))
    return Content("\n").join(parts)


def tool_result_diff(result: str) -> tuple[dict[str, Any], str] | None:
    """A tool result (JSON text) that carries a change as a unified diff (``memory_insert``, ``memory_replace``):
    the result without it, and the diff; None for any other result."""
    try:
        value = json.loads(result)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("diff"), str) or not value["diff"]:
        return None
    rest = {k: v for k, v in value.items() if k != "diff"}
    return rest, value["diff"]
