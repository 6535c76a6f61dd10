"""Assembling a soul template into a layered :class:`~.prompt_record.PromptAssembly`.

Assembly is pure: it reads caches through the context tools' handlers (which never touch the network)
and returns every section with its role, source tool, content, token count and skip reason, then the
history, the memory backend's context and the user's message.

Token counts are an input too: ``count`` gives them. Counting may be a round trip to the model helper, so an app
assembles uncounted on its loop (``count=None``), counts :func:`countable_texts` on a worker thread
(``llm.tokens.count_texts``) and fills the numbers in with :func:`count_assembly` (service/chat.py).

A tool-fed section shows what the tool returns: its ``content`` when it gives one, else its whole result as
the model would read it (JSON); its ``note`` — a remark for the model's own call when there is nothing, such
as "No contacts yet" — is never text that defeats ``skip_if_empty``: an empty section with ``skip_if_empty``
is skipped, and one without shows the note.

Whom it is for (``audience``, agent/audience.py): a section the turn's audience may not read is withheld — its tool is
never run, so nothing of it exists in the prompt or its record — and named with the reason; likewise the memory
backend's context (the caller withholds or narrows it: ``backend_withheld``).

What is sent (``PromptAssembly.messages``, exactly): consecutive *system* sections merged into one
system message (joined by a blank line) — many chat templates accept a single leading system message
only — then user/assistant sections as their own messages, the history, and finally the user's message.
The memory backend's context goes where ``backend_place`` says: ``"system"`` (the default, as the Skald
design has it: prepended to the extra system context, i.e. at the end of the leading system message, after
the soul's system sections and before any user/assistant section) or ``"after_history"`` (one system message
after the history: the dynamic tail, so providers' prefix caching keeps working on everything before it).
"""


from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ...errors import DidactylError
from ..audience import ADMIN_TURN, TurnAudience
from ..documents.versions import SourceEvent
from ..llm.tokens import count_tokens, message_text
from ..tools.registry import Tool, ToolContext, ToolRegistry, render_result
from .prompt_record import PromptAssembly, PromptLayer
from .template import SoulTemplate, section_tool_problem

BACKEND_PLACES = ("system", "after_history")  # where the memory backend's context goes ([memory] backend_context)
BACKEND_SECTION = "memory_backend"  # the name its layer has in the inspector


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | tuple | dict) and not value)


def section_text(result: Any) -> tuple[str, str]:
    """(text, note) a section shows for a tool's result: ``content`` when the tool gives one, else the whole result
    as the model reads it, "" when every value in it is empty; the ``note`` apart (the model's remark when there is
    nothing: shown only by a section that is kept when empty)."""
    if not isinstance(result, Mapping):
        return render_result(result), ""
    note = result.get("note")
    note = note if isinstance(note, str) else ""
    if "content" in result:
        content = result["content"]
        return (content if isinstance(content, str) else render_result(content)), note
    rest = {k: v for k, v in result.items() if k != "note"}
    return ("" if all(_empty(v) for v in rest.values()) else render_result(rest)), note


def tool_origins(registry: ToolRegistry, backend_tools: Sequence[Tool], backend_id: str | None) -> dict[str, str]:
    """Where each tool offered comes from, by name (aliases too): "didactyl", "MCP server x", "memory backend y"."""
    out: dict[str, str] = {}
    for tool in registry.visible():
        for name in (tool.name, *(tool.aliases if registry.offer_aliases else ())):
            out[name] = tool.origin or "didactyl"
    for tool in backend_tools:
        if tool.visible:
            out[tool.name] = tool.origin or f"memory backend {backend_id or ''}".strip()
    return out


def _run_context_tool(tool: Tool, ctx: ToolContext | None) -> tuple[str, str, str | None]:
    """(text, note, error) from a context tool's handler, synchronously (soul sections read caches only)."""
    problem = section_tool_problem(tool)
    if problem is not None:
        return "", "", problem
    kwargs: dict[str, Any] = {}
    if tool.context_param is not None:
        if ctx is None:
            return "", "", f"tool {tool.name} needs a context"
        kwargs[tool.context_param] = ctx
    try:
        result = tool.handler(**kwargs)
    except DidactylError as exc:  # e.g. "no admin is configured": the reason the section is skipped
        return "", "", exc.message
    except Exception as exc:  # a tool bug must not break the prompt
        return "", "", f"tool error: {type(exc).__name__}: {exc}"
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        return "", "", f"tool {tool.name} is async; a soul section needs a cache-only tool"
    return (*section_text(result), None)


def _merge_messages(layers: Sequence[PromptLayer]) -> list[dict[str, Any]]:
    """Consecutive system sections become one system message; user/assistant sections stay apart."""
    out: list[dict[str, Any]] = []
    for layer in layers:
        if layer.skipped:
            continue
        if layer.role == "system" and out and out[-1]["role"] == "system":
            out[-1]["content"] = f"{out[-1]['content']}\n\n{layer.content}"
        else:
            out.append({"role": layer.role, "content": layer.content})
    return out


def assemble(
    template: SoulTemplate,
    *,
    model: str,
    registry: ToolRegistry,
    ctx: ToolContext | None,
    created_at: float,
    history: Sequence[Mapping[str, Any]] = (),
    history_dropped: int = 0,
    user_message: str | None = None,
    backend_id: str | None = None,
    backend_context: str | None = None,
    backend_tools: Sequence[Tool] = (),
    backend_place: str = "system",
    source_events: Mapping[str, SourceEvent] | None = None,
    soul_source: SourceEvent | None = None,
    dry_run: bool = False,
    audience: TurnAudience = ADMIN_TURN,
    backend_withheld: str | None = None,
    count: Callable[[str, str], int] | None = count_tokens,
) -> PromptAssembly:
    """Build the prompt record and exactly the messages to send. Pure: no network, no clock.

    ``source_events`` maps a tool name to the Nostr event its content came from (documents, identity);
    ``soul_source`` is the soul's own version: the source of every literal-text section.
    Backend tools are offered after the registry's visible tools. ``backend_place``: see the module docstring.
    ``audience``: whom the turn is for; ``backend_withheld``: why the backend's context is left out (None: it is not).
    ``count(model, text)``: a text's tokens (the default counts here, or asks the model helper: blocking); None
    leaves every count at 0, for :func:`count_assembly` to fill in.
    """
    if backend_place not in BACKEND_PLACES:
        raise ValueError(f"backend_place must be one of {', '.join(BACKEND_PLACES)}, not {backend_place!r}")
    layers: list[PromptLayer] = []
    sources = source_events or {}
    for sec in template.sections:
        source: SourceEvent | None = None
        tool = registry.get(sec.tool) if sec.tool else None
        readers = sec.audience_for(tool)
        who = readers.value
        if not audience.sees(readers):  # never rendered: nothing of it reaches the prompt or its record
            layers.append(PromptLayer(sec.section, sec.role, sec.tool, "", 0, True, audience.withheld(), audience=who))
            continue
        if sec.tool and tool is None:
            layers.append(PromptLayer(sec.section, sec.role, sec.tool, "", 0, True, f"unknown tool {sec.tool!r}",
                                      audience=who))
            continue
        if tool is not None:
            text, note, error = _run_context_tool(tool, ctx)
            if error is not None:
                layers.append(PromptLayer(sec.section, sec.role, sec.tool, "", 0, True, error, audience=who))
                continue
            if not text.strip() and not sec.skip_if_empty:
                text = note  # kept when empty: the tool's own words for "nothing"
            source = sources.get(tool.name)
        else:
            text = sec.content or ""
            source = soul_source
        if not text.strip() and sec.skip_if_empty:
            layers.append(PromptLayer(sec.section, sec.role, sec.tool, "", 0, True, "empty (skip_if_empty)", source,
                                      audience=who))
            continue
        layers.append(PromptLayer(sec.section, sec.role, sec.tool, text, 0, False, None,
                                  source if text.strip() else None, audience=who))

    messages = _merge_messages(layers)
    context = backend_context if backend_context and backend_context.strip() and backend_withheld is None else None
    if context and backend_place == "system":
        if messages and messages[0]["role"] == "system":
            messages[0]["content"] = f"{messages[0]['content']}\n\n{context}"
        else:
            messages.insert(0, {"role": "system", "content": context})
    history_msgs = tuple(dict(m) for m in history)
    messages.extend(history_msgs)
    if context and backend_place == "after_history":
        messages.append({"role": "system", "content": context})
    if user_message is not None:
        messages.append({"role": "user", "content": user_message})

    tools = [*registry.openai_schemas(), *(t.openai_schema() for t in backend_tools if t.visible)]
    assembly = PromptAssembly(
        model=model,
        created_at=created_at,
        layers=tuple(layers),
        history=history_msgs,
        history_dropped=history_dropped,
        backend_id=backend_id,
        backend_context=context,
        backend_tokens=0,
        backend_place=backend_place,
        user_message=user_message,
        tools=tuple(tools),
        messages=tuple(messages),
        total_tokens=0,
        dry_run=dry_run,
        audience=audience.name,
        audience_who=audience.who,
        backend_withheld=backend_withheld,
        extra={"soul_source": template.source, "section_tokens": 0, "history_tokens": 0, "user_tokens": 0,
               "tools_tokens": 0, "tool_origins": tool_origins(registry, backend_tools, backend_id)},
    )
    if count is None:
        return assembly
    return count_assembly(assembly, lambda text: count(model, text))


def _tools_text(tools: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(tools), separators=(",", ":")) if tools else ""


def countable_texts(assembly: PromptAssembly) -> Iterator[str]:
    """Every text whose tokens :func:`count_assembly` asks for (repeats included)."""
    for layer in assembly.layers:
        if not layer.skipped:
            yield layer.content
    if assembly.backend_context:
        yield assembly.backend_context
    for message in assembly.history:
        yield message_text(message)
    if assembly.user_message is not None:
        yield assembly.user_message
    if assembly.tools:
        yield _tools_text(assembly.tools)


def count_assembly(assembly: PromptAssembly, count: Callable[[str], int]) -> PromptAssembly:
    """``assembly`` with every token count from ``count`` (a text's tokens): each section's, the backend's, the
    history's, the message's, the tool schemas' and the total. Pure when ``count`` is (a lookup in counts made
    before: service/chat.py)."""
    layers = tuple(dataclasses.replace(layer, tokens=0 if layer.skipped else count(layer.content))
                   for layer in assembly.layers)
    backend_tokens = count(assembly.backend_context) if assembly.backend_context else 0
    history_tokens = sum(count(message_text(m)) for m in assembly.history)
    user_tokens = count(assembly.user_message) if assembly.user_message is not None else 0
    tools_tokens = count(_tools_text(assembly.tools)) if assembly.tools else 0
    section_tokens = sum(layer.tokens for layer in layers)
    return dataclasses.replace(
        assembly, layers=layers, backend_tokens=backend_tokens,
        total_tokens=section_tokens + history_tokens + backend_tokens + user_tokens + tools_tokens,
        extra={**assembly.extra, "section_tokens": section_tokens, "history_tokens": history_tokens,
               "user_tokens": user_tokens, "tools_tokens": tools_tokens},
    )
