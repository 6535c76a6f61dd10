"""``post_note``: the agent publishes a public kind 1 note, after the user confirms (unless config allows); the
context's :class:`~.note_poster.NotePoster` does it."""

from __future__ import annotations

from typing import Any

from .context import AgentToolContext
from .registry import Tool, ToolError, build_tool


async def post_note(text: str, ctx: AgentToolContext) -> dict[str, Any]:
    """Publish a public note (kind 1) under your own key. Everyone can read it; the user may be asked first.

    Args:
        text: The note's text (plain text, at most 2,000 characters).
    """
    if ctx.notes is None:
        raise ToolError("posting notes is not available here")
    return await ctx.notes.post(text)


NOTE_TOOLS: tuple[Tool, ...] = (build_tool(post_note, family="notes", acts=True),)
