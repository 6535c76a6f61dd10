"""What a turn leaves in the conversation, read from its events (the same stream the views draw).

A finished turn keeps its messages (:class:`~.events.TurnFinished` ``new_messages``), each tool result with its
call's ``ending``; a turn cancelled or failed part way keeps what it had said and done so far (:class:`TurnRecord`),
every message marked with a ``status`` so it is shown, after a resume too, and never sent to the model again. The
ending and the status are for showing: the conversation store never sends them to the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .events import AgentEvent, TextDelta, ToolCallFinished, ToolCallStarted, TurnFinished

# What a call that was still running when its turn ended keeps as its result.
NOT_FINISHED = "(not finished: the turn ended while it ran)"


def unanswered_note(status: str, *, in_part: bool) -> str:
    """How a failed or cancelled turn's message is marked, live and kept: "cancelled: not answered", or
    "...: answered in part" when the turn said or did something first."""
    return f"{status}: {'answered in part' if in_part else 'not answered'}"


def answered_in_part(following: Mapping[str, Any] | None) -> bool:
    """For a kept failed or cancelled turn's message: is the message ``following`` it (None: none) the first of
    that turn's part so far (marked with a status too)?"""
    return following is not None and following.get("role") != "user" and bool(following.get("status"))


def finished_messages(event: TurnFinished) -> list[dict[str, Any]]:
    """A finished turn's messages as kept: each tool result says how its call ended."""
    endings = {call.call_id: call.ending for call in event.tool_calls}
    return [{**m, "ending": endings[m["tool_call_id"]]} if m.get("role") == "tool" and m.get("tool_call_id")
            in endings else dict(m) for m in event.new_messages]


class TurnRecord:
    """The messages of a turn so far, folded from its events as they pass (text, tool calls, their results)."""

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] = []
        self._text: list[str] = []
        self._round = 0  # the round whose calls the last assistant message carries
        self._running: dict[str, str] = {}  # call id -> name, started and not finished

    def take(self, event: AgentEvent) -> None:
        match event:
            case TextDelta(text=text):
                self._text.append(text)
            case ToolCallStarted():
                if event.round != self._round or not self._messages:
                    self._round = event.round
                    self._messages.append({"role": "assistant", "content": self._take_text() or None,
                                           "tool_calls": []})
                self._messages[-1]["tool_calls"].append({
                    "id": event.call_id, "type": "function",
                    "function": {"name": event.name, "arguments": json.dumps(event.arguments, ensure_ascii=False)}})
                self._running[event.call_id] = event.name
            case ToolCallFinished():
                self._running.pop(event.call_id, None)
                self._messages.append({"role": "tool", "tool_call_id": event.call_id, "content": event.result,
                                       "ending": event.ending})

    def _take_text(self) -> str:
        text, self._text = "".join(self._text).strip(), []
        return text

    def so_far(self, status: str) -> list[dict[str, Any]]:
        """What the turn had said and done when it ended, every message marked ``status`` (e.g. "cancelled"):
        calls still running end "cancelled"; the reply's text so far comes last."""
        out = [dict(m) for m in self._messages]
        out += [{"role": "tool", "tool_call_id": call_id, "content": NOT_FINISHED, "ending": "cancelled"}
                for call_id in self._running]
        text = "".join(self._text).strip()
        if text:
            out.append({"role": "assistant", "content": text})
        return [{**m, "status": status} for m in out]
