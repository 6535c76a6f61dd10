"""A resumed chat's older entries, kept as data behind one cheap fixed-height stub until scrolled to.

A resumed session may hold thousands of messages; mounting a Markdown widget for each costs seconds. The
conversation mounts full entries only for its last screens and puts everything older in a
:class:`HistoryStub` whose height is the estimated height of those entries, so the scrollbar still tells the
truth about the chat's length. When the viewport comes near a stub, the conversation swaps the part of the
stub in view for real entries (see ``Conversation.materialize_near_viewport``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from textual.content import Content
from textual.widgets import Static

# Entry geometry from app.tcss (margin-top 1, round border 2 rows, padding 0 1, side margins by role).
_ENTRY_FRAME_ROWS = 3
_ENTRY_FRAME_COLS = {"user": 2 + 2 + 8, "assistant": 2 + 2 + 4}
_TOOL_CALL_ROWS = 2  # margin-top 1 + the collapsed title


@dataclass(frozen=True, slots=True)
class EntrySpec:
    """One entry of a stored chat: a message (``role`` user/assistant) or a tool call with its result."""

    role: str  # "user" | "assistant" | "tool"
    text: str = ""
    call_id: str = ""
    name: str = ""
    arguments: Any = None  # the parsed JSON arguments, as the live entry shows them
    result: str | None = None
    status: str = ""  # a failed or cancelled turn's message: why it got no (whole) answer
    ending: str = ""  # a tool call: how it ended (done, error, refused, cancelled); "" when not recorded
    answered_in_part: bool = False  # a failed or cancelled turn's user message: the turn said or did something


def specs_from_messages(messages: Iterable[Mapping[str, Any]]) -> list[EntrySpec]:
    """Stored OpenAI-format messages as entries; a tool message becomes the result of its call."""
    messages = list(messages)
    specs: list[EntrySpec] = []
    call_at: dict[str, int] = {}
    for n, msg in enumerate(messages):
        role = msg.get("role")
        content = msg.get("content")
        text = content if isinstance(content, str) else ""
        status = str(msg.get("status") or "")
        if role == "user":
            specs.append(EntrySpec("user", text, status=status, answered_in_part=bool(status) and _answered_in_part(
                messages[n + 1] if n + 1 < len(messages) else None)))
        elif role == "assistant":
            if text:
                specs.append(EntrySpec("assistant", text, status=status))
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = {"raw": fn.get("arguments")}
                call_id = str(call.get("id", ""))
                call_at[call_id] = len(specs)
                specs.append(EntrySpec("tool", call_id=call_id, name=str(fn.get("name", "?")), arguments=args))
        elif role == "tool":
            at = call_at.get(str(msg.get("tool_call_id", "")))
            if at is not None:
                old = specs[at]
                specs[at] = replace(old, result=text, ending=str(msg.get("ending") or ""))
    return specs


def _answered_in_part(following: Mapping[str, Any] | None) -> bool:
    # Imported for a failed turn only: the service's types cost a resumed chat's first frame ~30 ms (#34).
    from ...service.types import answered_in_part

    return answered_in_part(following)


def stub_data(messages: Iterable[Mapping[str, Any]], width: int) -> tuple[list[EntrySpec], list[int]]:
    """(Pure: on a worker thread for a long chat.) Stored messages as entries, and their heights at ``width``."""
    specs = specs_from_messages(messages)
    return specs, [estimate_height(spec, width) for spec in specs]


def estimate_height(spec: EntrySpec, width: int) -> int:
    """Rows the entry will take at ``width`` columns (a guess: wrapped lines, no markdown layout)."""
    if spec.role == "tool":
        return _TOOL_CALL_ROWS
    inner = max(10, width - _ENTRY_FRAME_COLS.get(spec.role, 6))
    rows = 0
    for line in spec.text.split("\n"):
        rows += max(1, -(-len(line) // inner))
    return _ENTRY_FRAME_ROWS + rows


class HistoryStub(Static):
    """Stands for ``specs`` (consecutive older entries) at their estimated height."""

    def __init__(self, specs: list[EntrySpec], heights: list[int]) -> None:
        count = len(specs)
        label = f"⋯ {count:,} earlier {'entry' if count == 1 else 'entries'}"
        super().__init__(Content(label), classes="history-stub")
        self.specs = specs
        self.heights = heights
        self.replaced = False  # its entries (and smaller stubs) are mounted beside it; it is on its way out
        self.styles.height = max(1, sum(heights))

    def split_at_rows(self, top: int, bottom: int, limit: int) -> tuple[int, int]:
        """The index range of specs overlapping rows ``top..bottom`` of this stub, at most ``limit`` long.

        The range grows from the row nearest ``bottom`` upward: the conversation is read bottom up.
        """
        y = 0
        first = last = None
        for index, height in enumerate(self.heights):
            if y + height > top and y < bottom:
                if first is None:
                    first = index
                last = index + 1
            y += height
        if first is None or last is None:
            last = len(self.specs)
            first = max(0, last - 1)
        return max(first, last - limit), last
