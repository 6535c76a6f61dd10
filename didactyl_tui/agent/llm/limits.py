"""Bounds on one agent turn: what a model reply may cost us in memory, time, storage and tool runs.

A model is outside input (STYLE: "everything has a bound"): a server can stream forever, drip two tokens a
second, send a 20 MB tool argument or a thousand ``memory_save`` calls in one reply. :class:`TurnLimits`
holds the configured bounds (``[llm]`` in config.toml) and :class:`ToolCallGate` decides, call by call,
which tool calls of a turn may run; a refused call gets a readable result telling the model why, and its
arguments are never kept (a short placeholder replaces them), so nothing oversized reaches the conversation
database.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

# Tools that have their own per-turn limit, and the [llm] key that sets it.
MEMORY_SAVE_TOOL = "memory_save"
WRITE_FILE_TOOL = "write_file"


@dataclass(frozen=True, slots=True)
class TurnLimits:
    """The bounds of one turn; the defaults are the documented defaults of ``[llm]``."""

    max_reply_chars: int = 1_000_000  # text + tool-call arguments received in one model reply
    turn_timeout_s: float = 600.0  # the whole turn, all rounds and tools included
    max_tool_argument_chars: int = 300_000  # one tool call's arguments (JSON text)
    max_tool_calls_per_reply: int = 16
    max_tool_calls_per_turn: int = 64
    max_calls_per_tool: int = 16  # per tool per turn, unless named in per_tool
    per_tool: dict[str, int] = field(default_factory=lambda: {MEMORY_SAVE_TOOL: 4, WRITE_FILE_TOOL: 16})

    def __post_init__(self) -> None:
        for name in ("max_reply_chars", "max_tool_argument_chars", "max_tool_calls_per_reply",
                     "max_tool_calls_per_turn", "max_calls_per_tool"):
            if getattr(self, name) < 1:
                raise ValueError(f"TurnLimits.{name} must be at least 1")
        if not (math.isfinite(self.turn_timeout_s) and self.turn_timeout_s > 0):
            raise ValueError("TurnLimits.turn_timeout_s must be a positive finite number")

    def per_tool_limit(self, name: str) -> int:
        return self.per_tool.get(name, self.max_calls_per_tool)

    @classmethod
    def from_config(cls, llm: Any) -> TurnLimits:
        """From ``config.LlmConfig`` (attributes missing on an older config object keep their defaults)."""
        default = cls()

        def get(key: str, fallback: Any) -> Any:
            return getattr(llm, key, fallback)

        return cls(
            max_reply_chars=int(get("max_reply_chars", default.max_reply_chars)),
            turn_timeout_s=float(get("turn_timeout_s", default.turn_timeout_s)),
            max_tool_argument_chars=int(get("max_tool_argument_chars", default.max_tool_argument_chars)),
            max_tool_calls_per_reply=int(get("max_tool_calls_per_reply", default.max_tool_calls_per_reply)),
            max_tool_calls_per_turn=int(get("max_tool_calls_per_turn", default.max_tool_calls_per_turn)),
            max_calls_per_tool=int(get("max_calls_per_tool", default.max_calls_per_tool)),
            per_tool={
                MEMORY_SAVE_TOOL: int(get("max_memory_saves_per_turn", default.per_tool[MEMORY_SAVE_TOOL])),
                WRITE_FILE_TOOL: int(get("max_file_writes_per_turn", default.per_tool[WRITE_FILE_TOOL])),
            },
        )


_PER_TOOL_KEYS = {MEMORY_SAVE_TOOL: "max_memory_saves_per_turn", WRITE_FILE_TOOL: "max_file_writes_per_turn"}
_PER_TOOL_HINTS = {
    MEMORY_SAVE_TOOL: "each save replaces the whole memory, so put everything you want to keep into one save",
    WRITE_FILE_TOOL: "write fewer, larger files, or continue in the next turn",
}


def omitted_arguments(chars: int) -> str:
    """The short JSON placeholder kept instead of arguments that were refused (valid JSON: providers
    refuse a history whose tool-call arguments do not parse)."""
    return json.dumps({"_omitted": f"{chars:,} characters of arguments, not kept (the call was refused)"})


class ToolCallGate:
    """Counts a turn's tool calls and refuses those over the limits (one gate per turn)."""

    def __init__(self, limits: TurnLimits) -> None:
        self.limits = limits
        self.total = 0
        self.by_tool: dict[str, int] = {}

    def refusal(self, name: str, argument_chars: int) -> str | None:
        """None when the call may run (and it is counted), else the result the model reads."""
        limits = self.limits
        if argument_chars > limits.max_tool_argument_chars:
            return (f"Error: not run: the arguments of this {name} call were {argument_chars:,} characters; a tool "
                    f"call may carry at most {limits.max_tool_argument_chars:,} ([llm] max_tool_argument_chars). "
                    "Send less at once.")
        if self.total >= limits.max_tool_calls_per_turn:
            return (f"Error: not run: this turn already made {limits.max_tool_calls_per_turn} tool calls, the most "
                    "a turn may make ([llm] max_tool_calls_per_turn). Answer with what you have.")
        used = self.by_tool.get(name, 0)
        cap = limits.per_tool_limit(name)
        if used >= cap:
            key = _PER_TOOL_KEYS.get(name, "max_calls_per_tool")
            hint = _PER_TOOL_HINTS.get(name, "answer with what you have")
            return (f"Error: not run: {name} may run at most {cap} times per turn ([llm] {key}) and it already "
                    f"did; {hint}.")
        self.total += 1
        self.by_tool[name] = used + 1
        return None

    def excess_note(self, made: int) -> str:
        """Appended to a reply's last tool result when the reply asked for more calls than one reply may make."""
        cap = self.limits.max_tool_calls_per_reply
        return (f"\n\nNote: this reply asked for {made:,} tool calls; only the first {cap} were considered "
                f"(at most {cap} per reply: [llm] max_tool_calls_per_reply). The other {made - cap:,} were not run.")
