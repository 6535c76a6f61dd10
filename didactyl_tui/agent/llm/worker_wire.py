"""The rows that cross the pipe between the app and its model helper (``llm.worker``; its docstring has the whole
protocol), both ends in one place: a call's settings on the way in, a reply's chunks on the way out."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .errors import ERROR_KINDS, LlmError
from .usage import Usage

if TYPE_CHECKING:
    from .types import LlmChunk, LlmSettings


def settings_data(settings: LlmSettings) -> dict[str, Any]:
    """(The app.) A call's settings as JSON data."""
    data = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    data["limits"] = dataclasses.asdict(settings.limits)
    return data


def settings_from_data(data: dict[str, Any]) -> LlmSettings:
    """(The helper.) The settings :func:`settings_data` sent."""
    from .limits import TurnLimits
    from .types import LlmSettings

    limits = TurnLimits(**data.pop("limits", {}))
    return LlmSettings(**data, limits=limits)


def chunk_row(chunk: LlmChunk) -> list[Any]:
    """(The helper.) One chunk as the row ``[text, tool_calls, finish, usage]``."""
    calls = [[c.index, c.id, c.name, c.arguments] for c in chunk.tool_calls] or None
    usage = chunk.usage
    return [chunk.text, calls, chunk.finish_reason,
            None if usage is None else [usage.prompt_tokens, usage.completion_tokens, usage.cost_usd]]


def chunks(batch: list[dict[str, Any]]) -> Iterator[LlmChunk | None]:
    """(The app.) The chunks of one read, in order (consecutive text-only ones joined); None ends the call, an error
    is raised where it came (after the chunks before it)."""
    from .types import LlmChunk, ToolCallDelta

    text: list[str] = []
    for message in batch:
        row = message.get("c")
        if row is not None:
            piece, calls, finish, usage = row
            if not calls and finish is None and usage is None:
                text.append(piece)
                continue
        if text:
            yield LlmChunk("".join(text))
            text.clear()
        if row is not None:
            yield LlmChunk(piece, tuple(ToolCallDelta(*c) for c in calls or ()), finish,
                           Usage(*usage) if usage is not None else None)
        elif "error" in message:
            e = message["error"]
            kind = e.get("kind") if e.get("kind") in ERROR_KINDS else "server"  # never a ValueError instead
            raise LlmError(str(e.get("message", "")), kind, retry_after=e.get("retry_after"), status=e.get("status"))
        elif "gone" in message:
            why = f" ({message['gone']})" if message["gone"] else ""
            raise LlmError(f"The model's helper process stopped{why}; try again.", "connection")
        else:
            yield None
            return
    if text:
        yield LlmChunk("".join(text))
