"""Turns of an OpenAI-format conversation, and the repair that keeps a history acceptable to providers.

A turn is a user message and everything after it up to the next user message, so an assistant's tool calls
always travel with their results; a history that separates them is refused by providers.
"""

from __future__ import annotations

from typing import Any


def group_turns(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split a conversation into turns, each starting at a user message (leading non-user messages form one)."""
    turns: list[list[dict[str, Any]]] = []
    for message in messages:
        if message["role"] == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def repair_tool_pairs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop tool calls without results and results without calls, so a provider accepts the history.

    An assistant message whose calls are not all answered loses its ``tool_calls`` (kept if it has text,
    dropped otherwise) together with the partial answers; a tool message that answers no call is dropped.
    """
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        if message["role"] == "assistant" and message.get("tool_calls"):
            ids = [c.get("id") for c in message["tool_calls"]]
            j = i + 1
            results: list[dict[str, Any]] = []
            while j < len(messages) and messages[j]["role"] == "tool":
                results.append(messages[j])
                j += 1
            answered = {r.get("tool_call_id") for r in results}
            if set(ids) <= answered:
                out.append(message)
                out.extend(r for r in results if r.get("tool_call_id") in set(ids))
            elif message.get("content"):
                out.append({k: v for k, v in message.items() if k != "tool_calls"})
            i = j
            continue
        if message["role"] == "tool":
            i += 1  # an orphan result
            continue
        out.append(message)
        i += 1
    return out
