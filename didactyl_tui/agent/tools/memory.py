"""Memory tools: save and read the agent's Nostr memories (kind 30078, NIP-44 encrypted to itself).

``memory_save`` goes through the context's ``save_memory`` (in the app: ``MemorySync.save``), the one path the
editor, the CLI and rollback take too.
``memory_short_term_read`` is internal: it feeds the ``short_term_memory`` soul section and is never
offered to the model (the short-term memory is already in every prompt).
"""

from __future__ import annotations

from typing import Any, Literal

from ..documents.keys import DocumentKey
from ..documents.versions import DocumentSnapshot
from .context import AgentToolContext
from .registry import Tool, build_tool


def usage_line(snap: DocumentSnapshot) -> str:
    """Letta-style budget line, e.g. ``(1,234/8,000 chars used)``."""
    return f"({snap.chars:,}/{snap.limit_chars:,} chars used)"


def render_memory_section(snap: DocumentSnapshot) -> str:
    """``## Short-Term Memory`` + blank line + the content, then the budget on its own line; "" when empty."""
    if not snap.content.strip():
        return ""
    return f"## {snap.type.title}\n\n{snap.content.rstrip()}\n\n{usage_line(snap)}"


async def memory_save(type: Literal["short_term", "long_term"], content: str, ctx: AgentToolContext) -> dict[str, Any]:
    """Replace one of your memories with new text, encrypted to yourself and published to your relays.

    The short-term memory is shown to you in every prompt: keep there what you need in every
    conversation (current tasks, facts about the user you must not forget). The long-term memory is
    larger and read on demand with my_memory: keep there what you may need later. A save replaces the
    whole memory, so include everything you want to keep.

    Args:
        type: Which memory to replace: "short_term" or "long_term".
        content: The complete new text of that memory (markdown); it replaces the old text entirely.
    """
    t = DocumentKey.parse_memory(type)
    assert ctx.save_memory is not None  # set by AgentToolContext.__post_init__
    result = await ctx.save_memory(t, content)
    out = result.to_json_dict()
    out["chars"] = len(content)
    out["limit_chars"] = ctx.memory.limit(t)
    if result.deferred:
        out["note"] = ("saved here and in use; it is published as soon as it can be signed (many saves in a row: "
                       "only the newest, within seconds; a remote signer that does not answer: once it does)")
    elif result.refused:
        out["warning"] = "every relay refused this save for good; it is not resent (later saves are not affected)"
    elif not result.any_accepted:
        out["warning"] = "no relay accepted the save yet; it is kept locally and will show as not published"
    return out


async def my_memory(ctx: AgentToolContext) -> dict[str, Any]:
    """Read your long-term memory (decrypted). Empty when you have not saved one yet."""
    snap = ctx.memory.snapshot(DocumentKey.LONG_TERM)
    if not snap.loaded:
        snap = (await ctx.memory.load([DocumentKey.LONG_TERM]))[DocumentKey.LONG_TERM]
    if not snap.content.strip():
        return {"content": "", "note": "Your long-term memory is empty.", "limit_chars": snap.limit_chars}
    return {
        "content": render_memory_section(snap),
        "chars": snap.chars,
        "limit_chars": snap.limit_chars,
        "event_id": snap.event_id,
    }


def memory_short_term_read(ctx: AgentToolContext) -> dict[str, str]:
    """Your short-term memory, as shown in the prompt (internal: feeds the short_term_memory section)."""
    return {"content": render_memory_section(ctx.memory.snapshot(DocumentKey.SHORT_TERM))}


MEMORY_TOOLS: tuple[Tool, ...] = (
    build_tool(memory_save, family="memory"),
    build_tool(my_memory, family="memory"),
    build_tool(memory_short_term_read, visible=False, family="memory"),
)
