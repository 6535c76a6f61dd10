"""What a turn emits, as past-tense dataclasses the UI and CLI render (no Textual here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..llm.usage import Usage
from ..soul.prompt_record import PromptAssembly

# How a tool call ended: ran and answered, ran and failed, not run (refused), or cut off when its turn was cancelled.
TOOL_ENDINGS = ("done", "error", "refused", "cancelled")


@dataclass(frozen=True, slots=True)
class TurnStarted:
    session_id: str
    assembly: PromptAssembly


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the streamed reply (batched by the loop, not one per token)."""

    text: str


@dataclass(frozen=True, slots=True)
class TextComplete:
    """The model has said its text is whole (the round's ``finish_reason`` came, "stop" or "length", with no tool
    call): what was streamed may be shown in full now. The turn still ends with :class:`TurnFinished`, once the stream
    has closed and the turn is kept; litellm ends a stream 40-80 ms after its last token (measured), so the reply's
    last words reach the screen that much sooner (#34)."""


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    call_id: str
    name: str
    arguments: dict[str, Any]
    round: int


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: str  # what went back to the model (JSON text or readable error)
    is_error: bool
    round: int
    refused: bool = False  # not run: a policy or a limit refused it
    permission: str = ""  # a tool that acts: who allowed or denied it (agent/tools/permission.py)

    @property
    def ending(self) -> str:
        """How the call ended, as the conversation shows it live and keeps it: one of :data:`TOOL_ENDINGS`."""
        return "refused" if self.refused else "error" if self.is_error else "done"


@dataclass(frozen=True, slots=True)
class TurnFinished:
    session_id: str
    reply: str
    tool_calls: list[ToolCallFinished] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    rounds: int = 1
    # The assistant/tool messages (OpenAI format) to append to the conversation, in order.
    new_messages: list[dict[str, Any]] = field(default_factory=list)
    # Set when a bound ended the turn early (reply size, turn deadline): why, in one line. The reply's
    # text is kept and ends with a visible "[reply cut short: ...]" marker.
    cut: str | None = None


@dataclass(frozen=True, slots=True)
class TurnFailed:
    """The turn ended with an error the user should see; the conversation is unchanged/kept."""

    session_id: str
    message: str  # one readable line
    title: str = "LLM error"
    retryable: bool = True
    mark: str = ""  # how the user's message is marked ("": failed, not answered), e.g. "not delivered"


AgentEvent = (TurnStarted | TextDelta | TextComplete | ToolCallStarted | ToolCallFinished | TurnFinished
              | TurnFailed)
