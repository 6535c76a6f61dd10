"""The agent's and the protocol's types (and two pure helpers) that the views show or match on.

The views import only the service (the layer contract in pyproject.toml), so what they need from below is named
here, once, on purpose: a boundary, not a path kept alive for old imports. Nothing in the service or below
imports from here; the service's own types are imported from the module that defines them.
"""

from ..agent.conversations.assembly_log import SavedAssembly
from ..agent.conversations.session_info import SessionInfo
from ..agent.conversations.session_kind import SessionKind
from ..agent.documents.keys import DocumentKey
from ..agent.documents.merge import END, START, conflicts_left
from ..agent.documents.text_diff import NO_NEWLINE, diff_lines
from ..agent.documents.versions import DocumentSnapshot, NewerVersionKnown, SaveResult
from ..agent.identity.cache import IdentityView, SelfContextSnapshot
from ..agent.llm.usage import Usage
from ..agent.soul.content import read_soul_text
from ..agent.soul.prompt_record import PromptAssembly
from ..agent.tasks.task_list import Task, TaskList
from ..agent.tools.permission import Decision, PermissionRequest
from ..agent.turn.events import (
    AgentEvent,
    TextComplete,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)
from ..agent.turn.record import NOT_FINISHED, answered_in_part, unanswered_note
from ..nostr.nip19 import encode_npub
from ..nostr.replaceable import is_newer
from ..nostr.results import ConnectionState, PublishOutcome, RelayVerdict

__all__ = [
    "END", "NOT_FINISHED", "NO_NEWLINE", "START", "AgentEvent", "ConnectionState", "Decision", "DocumentKey",
    "DocumentSnapshot", "IdentityView", "NewerVersionKnown", "PermissionRequest", "PromptAssembly", "PublishOutcome",
    "RelayVerdict", "SaveResult", "SavedAssembly", "SelfContextSnapshot", "SessionInfo", "SessionKind", "Task",
    "TaskList", "TextComplete", "TextDelta", "ToolCallFinished", "ToolCallStarted", "TurnFailed", "TurnFinished",
    "TurnStarted", "Usage", "answered_in_part", "conflicts_left", "diff_lines", "encode_npub", "is_newer",
    "read_soul_text", "unanswered_note"
]
