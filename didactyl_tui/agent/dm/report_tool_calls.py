"""The tool calls of a served turn as the prompt report carries them (#31): each call's name, short arguments and
outcome, so the admin's attached window shows them in the conversation as the terminal does.

Both ways bounded: at most :data:`MAX_TOOL_CALLS` calls and :data:`MAX_ARGUMENT_KEYS` arguments each, every text cut
to a number of characters the report chooses (a cut argument ends with "…", ``result_cut`` and ``keys_left_off`` say
what was left out), and a reader that refuses a field of the wrong type and strips control characters from every
text. A nested argument travels as its JSON text, cut like any other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...errors import AgentError
from ...terminal_text import clean, one_line
from ..turn.events import ToolCallFinished

MAX_TOOL_CALLS = 64  # [llm] max_tool_calls_per_turn's default: a turn's calls, all of them in the usual case
MAX_ARGUMENT_KEYS = 16
KEY_CHARS = 80
NAME_CHARS = 80
TEXT_CHARS = 300  # an argument's value or a result: "short", as the conversation shows it folded


def _cut(text: str, limit: int) -> tuple[str, int]:
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def _short(value: Any, limit: int) -> Any:
    """An argument's value within ``limit`` characters ("…" ends a cut one): a string, a number as it is, anything
    else as JSON."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    text, cut = _cut(value, limit)
    return text + "…" if cut else text


def encode_tool_calls(calls: Sequence[ToolCallFinished], limit: int) -> list[dict[str, Any]]:
    """The first :data:`MAX_TOOL_CALLS` calls with their texts cut to ``min(limit, TEXT_CHARS)`` characters."""
    limit = min(limit, TEXT_CHARS)
    out = []
    for call in calls[:MAX_TOOL_CALLS]:
        items = list(call.arguments.items()) if isinstance(call.arguments, dict) else [("arguments", call.arguments)]
        arguments = {str(key)[:KEY_CHARS]: _short(value, limit) for key, value in items[:MAX_ARGUMENT_KEYS]}
        result, result_cut = _cut(call.result or "", limit)
        out.append({"name": call.name[:NAME_CHARS], "arguments": arguments, "result": result, "result_cut": result_cut,
                    "error": call.is_error, "round": call.round,
                    "keys_left_off": max(0, len(items) - MAX_ARGUMENT_KEYS)})
    return out


def _at_the_agent(text: str, cut: int) -> str:
    return f"{text}… [{cut:,} more characters at the agent]" if cut else text


def decode_tool_calls(raw: Any, reply_id: str, error: type[AgentError]) -> tuple[ToolCallFinished, ...]:
    """The calls a report names, as the turn events the conversation shows (call ids made from the reply's, one per
    call). ``error`` (the report's exception type) on a field of the wrong type."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise error("a prompt report's tool calls are not a list")
    calls = []
    for n, item in enumerate(raw[:MAX_TOOL_CALLS], start=1):
        if not isinstance(item, dict):
            raise error("a tool call is not an object")
        name, result, arguments = item.get("name"), item.get("result", ""), item.get("arguments", {})
        if not isinstance(name, str) or not isinstance(result, str) or not isinstance(arguments, dict):
            raise error("a tool call's name, arguments or result is of the wrong type")
        counts = [item.get("result_cut", 0), item.get("keys_left_off", 0), item.get("round", 1)]
        if any(isinstance(c, bool) or not isinstance(c, int) for c in counts):
            raise error("a tool call's counts are not numbers")
        result_cut, keys_left_off, rnd = (max(0, c) for c in counts)
        shown: dict[str, Any] = {}
        for key, value in list(arguments.items())[:MAX_ARGUMENT_KEYS]:
            if not (value is None or isinstance(value, bool | int | float)):
                value = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                value = clean(value[:TEXT_CHARS + 1])
            shown[one_line(str(key))[:KEY_CHARS]] = value
        if keys_left_off:
            shown["…"] = f"{keys_left_off:,} more arguments at the agent"
        text = _at_the_agent(clean(result[:TEXT_CHARS]), result_cut)
        calls.append(ToolCallFinished(f"{reply_id[:16]}-{n}", one_line(name[:NAME_CHARS]) or "?", shown, text,
                                      bool(item.get("error")), max(1, rnd)))
    return tuple(calls)


def conversation_messages(calls: tuple[ToolCallFinished, ...]) -> list[dict[str, Any]]:
    """The agent's tool calls as the conversation keeps a turn's (an assistant message naming the calls of each
    round, then each result), so a resumed chat shows them as it shows this app's own."""
    out: list[dict[str, Any]] = []
    for round_no in sorted({c.round for c in calls}):
        these = [c for c in calls if c.round == round_no]
        out.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}} for c in these]})
        out += [{"role": "tool", "tool_call_id": c.call_id, "content": c.result} for c in these]
    return out
