"""The service: the one API the views (TUI, CLI) use, and the types they show.

Parts, each owning its state:

- ``runtime``: the started objects (key, relays, stores, caches, conversations, backend); never None once built
- ``documents``: the agent's documents (memories, soul, tasks, profile, contacts, relays): snapshots, the one save
  path, rollback, history, relay status, the outbox count
- ``chat``: the model in use, sessions, prompt assembly, turns
- ``identity``: the agent's and admin's public identity, fetched, followed and published (startup events too)
- ``dm``: NIP-17 direct messages answered in DM sessions (TUI and ``serve``); ``relay_status``: what the
  shared embedded relay enforces
- ``soul``: how the views see the soul in use; ``bundle``: backup export/import
- ``notes``: who may confirm a ``post_note`` (the turn's session kind)
- ``events``: the typed events views receive (light: importable before the first frame)
- ``state``: <data dir>/state.toml, the one reader and writer (light)
- ``views``: how the views see outbox entries, versions and relay consensus; shared formatting
- ``app``: AppService, which starts the parts and is the views' one entry point

Importing this package is light: the names below load their modules on first use (the TUI's first frame
imports ``events`` and ``state`` only). Relay sync and lost-edit logic live in ``agent.documents.sync``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .events import (
    DmSessionChanged,
    MemoryChanged,
    OutboxChanged,
    PromptAssembled,
    RelayStateChanged,
    SelfContextChanged,
    ServiceEvent,
    ServiceWarning,
    SoulChanged,
)
from .labels import drift_lines, one_line, short_id, version_label, when
from .state import read_state, remember, write_state

if TYPE_CHECKING:  # what the lazy names are (import-linter sees these edges too)
    from ..agent.conversations.assembly_log import SavedAssembly
    from ..agent.conversations.session_info import SessionInfo
    from ..agent.conversations.session_kind import SessionKind
    from ..agent.documents.codec import DocumentError
    from ..agent.documents.keys import MEMORIES, DocumentKey
    from ..agent.documents.lineage import LOST_NOTE
    from ..agent.documents.sync import REFUSED_NOTE, NewerVersionKnown
    from ..agent.documents.versions import DocumentSnapshot, SaveResult
    from ..agent.identity.cache import IdentityView, SelfContextSnapshot
    from ..agent.identity.keystore import ENV_NSEC, ensure_data_dir, key_file_path, load_agent_key, write_key_file
    from ..agent.llm.usage import Usage
    from ..agent.soul.content import read_soul_text
    from ..agent.soul.lint import SoulLintError
    from ..agent.soul.prompt_record import PromptAssembly
    from ..agent.tasks.task_list import Task, TaskList
    from ..agent.turn.events import (
        AgentEvent,
        TextDelta,
        ToolCallFinished,
        ToolCallStarted,
        TurnFailed,
        TurnFinished,
        TurnStarted,
    )
    from ..nostr.embedded_relay.process import run_relay_process
    from ..nostr.embedded_relay.server import serve_forever
    from ..nostr.keys import SecretKey
    from ..nostr.nip19 import encode_npub
    from ..nostr.replaceable import is_newer
    from ..nostr.results import ConnectionState, PublishOutcome, RelayVerdict
    from .app import AppService, admin_pubkey_of
    from .chat import Sessions, open_sessions
    from .dm_status import DmStatus
    from .merge import MergeDraft
    from .model import ModelCheck, ModelSettings
    from .relay_status import RelayStatus, embedded_relay_options, embedded_relay_status
    from .runtime import ServiceToolContext, dm_peers
    from .soul import SoulView
    from .views import DocumentStatus, DocumentVersionView, PendingPublish, RelayDocumentStatus

_LAZY: dict[str, str] = {
    **dict.fromkeys(["SessionInfo"], "..agent.conversations.session_info"),
    **dict.fromkeys(["SavedAssembly"], "..agent.conversations.assembly_log"),
    **dict.fromkeys(["AgentEvent", "TextDelta", "ToolCallFinished", "ToolCallStarted", "TurnFailed", "TurnFinished",
                     "TurnStarted"], "..agent.turn.events"),
    **dict.fromkeys(["Usage"], "..agent.llm.usage"),
    **dict.fromkeys(["IdentityView", "SelfContextSnapshot"], "..agent.identity.cache"),
    **dict.fromkeys(["ENV_NSEC", "ensure_data_dir", "key_file_path", "load_agent_key", "write_key_file"],
                    "..agent.identity.keystore"),
    **dict.fromkeys(["DocumentError"], "..agent.documents.codec"),
    **dict.fromkeys(["MEMORIES", "DocumentKey"], "..agent.documents.keys"),
    **dict.fromkeys(["REFUSED_NOTE", "NewerVersionKnown"], "..agent.documents.sync"),
    **dict.fromkeys(["DocumentSnapshot", "SaveResult"], "..agent.documents.versions"),
    **dict.fromkeys(["LOST_NOTE"], "..agent.documents.lineage"),
    **dict.fromkeys(["PromptAssembly"], "..agent.soul.prompt_record"),
    **dict.fromkeys(["read_soul_text"], "..agent.soul.content"),
    **dict.fromkeys(["SoulLintError"], "..agent.soul.lint"),
    **dict.fromkeys(["SessionKind"], "..agent.conversations.session_kind"),
    **dict.fromkeys(["Task", "TaskList"], "..agent.tasks.task_list"),
    **dict.fromkeys(["serve_forever"], "..nostr.embedded_relay.server"),
    **dict.fromkeys(["run_relay_process"], "..nostr.embedded_relay.process"),
    **dict.fromkeys(["SecretKey"], "..nostr.keys"),
    **dict.fromkeys(["encode_npub"], "..nostr.nip19"),
    **dict.fromkeys(["ConnectionState", "PublishOutcome", "RelayVerdict"], "..nostr.results"),
    **dict.fromkeys(["AppService", "admin_pubkey_of"], ".app"),
    **dict.fromkeys(["Sessions", "open_sessions"], ".chat"),
    **dict.fromkeys(["MergeDraft"], ".merge"),
    **dict.fromkeys(["DmStatus"], ".dm_status"),
    **dict.fromkeys(["RelayStatus", "embedded_relay_options", "embedded_relay_status"], ".relay_status"),
    **dict.fromkeys(["ModelCheck", "ModelSettings"], ".model"),
    **dict.fromkeys(["ServiceToolContext", "dm_peers"], ".runtime"),
    **dict.fromkeys(["SoulView"], ".soul"),
    **dict.fromkeys(["is_newer"], "..nostr.replaceable"),
    **dict.fromkeys(["DocumentStatus", "DocumentVersionView", "PendingPublish", "RelayDocumentStatus"], ".views"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [  # noqa: RUF022 (sorted)
    "AgentEvent", "AppService", "ConnectionState", "DmSessionChanged", "DmStatus", "DocumentError", "DocumentKey",
    "DocumentSnapshot", "DocumentStatus", "DocumentVersionView", "ENV_NSEC", "IdentityView", "LOST_NOTE", "MEMORIES",
    "MemoryChanged", "MergeDraft", "ModelCheck",
    "ModelSettings", "NewerVersionKnown", "OutboxChanged", "PendingPublish", "PromptAssembled", "PromptAssembly",
    "PublishOutcome", "REFUSED_NOTE", "RelayDocumentStatus", "RelayStateChanged", "RelayStatus", "RelayVerdict",
    "SaveResult", "SavedAssembly", "SecretKey", "SelfContextChanged", "SelfContextSnapshot", "ServiceEvent",
    "ServiceToolContext", "ServiceWarning", "SessionInfo", "SessionKind", "Sessions", "SoulChanged", "SoulLintError",
    "SoulView", "Task", "TaskList", "TextDelta", "ToolCallFinished", "ToolCallStarted", "TurnFailed", "TurnFinished",
    "TurnStarted", "Usage", "admin_pubkey_of", "dm_peers", "drift_lines", "embedded_relay_options",
    "embedded_relay_status", "encode_npub", "ensure_data_dir",
    "is_newer", "key_file_path", "load_agent_key", "one_line", "open_sessions", "read_soul_text", "read_state",
    "remember",
    "run_relay_process", "serve_forever", "short_id", "version_label", "when", "write_key_file", "write_state",
]
