"""Memory tools: save, change and read the agent's Nostr memories (kind 30078, NIP-44 encrypted to itself).

``memory_save`` (the whole text), ``memory_insert`` and ``memory_replace`` (part of it: a memory grows by one line
without the model writing it all again) all save through ``DocumentSaves.save`` (the context's ``saves``), the one
path the editor, the CLI and rollback take too; a part is changed in the text in use, under the document's save lock
(a :class:`~..documents.saving.Change`). A burst is coalesced (the tools do not wait for the clock). Their results
show the change as a diff.
``memory_short_term_read`` is internal: it feeds the ``short_term_memory`` soul section and is never
offered to the model (the short-term memory is already in every prompt).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from ..documents.keys import DocumentKey
from ..documents.saving import Change
from ..documents.text_edit import change_diff, insert_lines, replace_once
from ..documents.versions import DocumentSnapshot, SaveResult
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


MemoryType = Literal["short_term", "long_term"]


def _outcome(result: SaveResult, chars: int, limit: int) -> dict[str, Any]:
    """A save's result as the model reads it: each relay's verdict, the size against the limit, what to know."""
    out: dict[str, Any] = result.to_json_dict()
    out["chars"] = chars
    out["limit_chars"] = limit
    if result.deferred:
        out["note"] = ("saved here and in use; it is published as soon as it can be signed (many saves in a row: "
                       "only the newest, within seconds; a remote signer that does not answer: once it does)")
    elif result.refused:
        out["warning"] = "every relay refused this save for good; it is not resent (later saves are not affected)"
    elif not result.any_accepted:
        out["warning"] = "no relay accepted the save yet; it is kept locally and will show as not published"
    return out


async def memory_save(type: MemoryType, content: str, ctx: AgentToolContext) -> dict[str, Any]:
    """Replace one of your memories with new text, encrypted to yourself and published to your relays.

    The short-term memory is shown to you in every prompt: keep there what you need in every
    conversation (current tasks, facts about the user you must not forget). The long-term memory is
    larger and read on demand with my_memory: keep there what you may need later. A save replaces the
    whole memory, so include everything you want to keep; to add a line or change a passage, memory_insert and
    memory_replace leave the rest as it is.

    Args:
        type: Which memory to replace: "short_term" or "long_term".
        content: The complete new text of that memory (markdown); it replaces the old text entirely.
    """
    t = DocumentKey.parse_memory(type)
    result = await ctx.saves.save(t, content, wait=False)
    return _outcome(result, len(content), ctx.memory.limit(t))


async def _change(ctx: AgentToolContext, t: DocumentKey, edit: Callable[[str], str]) -> dict[str, Any]:
    """Save ``edit(the text in use)`` through the one save path; the result shows the change as a diff."""
    if not ctx.memory.snapshot(t).loaded:
        await ctx.memory.load([t])
    codec = ctx.memory.codec(t)
    made: list[tuple[str, str]] = []

    def derive(value: Any) -> Any:  # under the document's save lock: the text is the one in use
        old = codec.to_text(value)
        new = edit(old)
        checked = ctx.saves.check(t, new)  # the limits: refused before anything is signed
        made.append((old, new))
        return checked

    result = await ctx.saves.save(t, Change(derive), wait=False)
    old, new = made[-1]
    out = _outcome(result, len(new), codec.limit_chars)
    out["diff"] = change_diff(old, new, t.value)
    return out


async def memory_insert(type: MemoryType, new_str: str, ctx: AgentToolContext, insert_line: int = -1) -> dict[str, Any]:
    """Add text to one of your memories on lines of its own, without rewriting the rest (the rest stays as it is).

    Use it to add a fact or a note; the result shows the change as a diff.

    Args:
        type: Which memory: "short_term" or "long_term".
        new_str: The text to add (one line or several).
        insert_line: The line after which it goes: 0 at the top, 1 after the first line, and so on; -1 (the
            default) at the end.
    """
    t = DocumentKey.parse_memory(type)
    return await _change(ctx, t, lambda text: insert_lines(text, new_str, insert_line, t.title))


async def memory_replace(type: MemoryType, old_str: str, new_str: str, ctx: AgentToolContext) -> dict[str, Any]:
    """Replace one exact passage of one of your memories (or delete it), without rewriting the rest.

    old_str must occur exactly once in that memory as it is now (copy it exactly, line breaks included; read the
    long-term memory with my_memory first); otherwise nothing changes and the error says why. The result shows the
    change as a diff.

    Args:
        type: Which memory: "short_term" or "long_term".
        old_str: The exact passage to replace, as it is in the memory now.
        new_str: The text to put in its place; empty to delete the passage.
    """
    t = DocumentKey.parse_memory(type)
    return await _change(ctx, t, lambda text: replace_once(text, old_str, new_str, t.title))


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
    build_tool(memory_insert, family="memory"),
    build_tool(memory_replace, family="memory"),
    build_tool(my_memory, family="memory"),
    build_tool(memory_short_term_read, visible=False, family="memory"),
)
