"""The layered record of one prompt assembly: what went in, from where, how big, what was skipped.

Produced by :func:`.assembly.assemble` (pure), shown by the TUI's prompt inspector, printed by
``didactyl prompt --json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..documents.versions import SourceEvent


@dataclass(frozen=True, slots=True)
class PromptLayer:
    section: str
    role: str  # system | user | assistant
    tool: str | None  # context tool that produced it (None for static content)
    content: str
    tokens: int
    skipped: bool = False
    skip_reason: str | None = None  # e.g. "empty (skip_if_empty)", "tool error: ...", "withheld: for the admin only…"
    source_event: SourceEvent | None = None
    audience: str | None = None  # who may read it: "admin" or "everyone" (agent/audience.py; None: an older record)


@dataclass(frozen=True, slots=True)
class PromptAssembly:
    model: str
    created_at: float  # wall-clock seconds, passed in by the caller
    layers: tuple[PromptLayer, ...]
    history: tuple[dict[str, Any], ...]  # the past messages included (OpenAI format)
    history_dropped: int  # older messages left out to fit the token budget
    backend_id: str | None
    backend_context: str | None  # the memory backend's context this turn (placed as ``backend_place`` says)
    backend_tokens: int
    user_message: str | None
    tools: tuple[dict[str, Any], ...]  # OpenAI-format tool schemas offered
    messages: tuple[dict[str, Any], ...]  # exactly what is sent to the model
    total_tokens: int
    dry_run: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # Where the backend context went: "system" (end of the leading system message, after the soul's system
    # sections) or "after_history" (its own system message after the history; records from before the choice).
    backend_place: str = "after_history"
    # The context policy applied (agent/audience.py): "admin" (everything) or "guest" (only what is for everyone),
    # whose conversation it was, and why the memory backend's context was left out, when it was.
    audience: str = "admin"
    audience_who: str = ""
    backend_withheld: str | None = None

    @property
    def withheld(self) -> list[PromptLayer]:
        """The sections this turn's audience may not read (left out, never rendered): in a guest's turn, every section
        for the admin only."""
        if self.audience == "admin":
            return []
        return [layer for layer in self.layers if layer.audience == "admin"]

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    @property
    def tool_origins(self) -> dict[str, str]:
        """Where each tool offered comes from ("didactyl", "MCP server x", "memory backend y"), by name; empty in an
        assembly saved before it was recorded."""
        origins = self.extra.get("tool_origins")
        return dict(origins) if isinstance(origins, dict) else {}

    def to_json_dict(self) -> dict[str, Any]:
        """The shape of ``didactyl prompt --json``."""
        return {
            "model": self.model,
            "sections": [
                {
                    "section": layer.section,
                    "role": layer.role,
                    "tool": layer.tool,
                    "skipped": layer.skipped,
                    "skip_reason": layer.skip_reason,
                    "tokens": layer.tokens,
                    "content": layer.content,
                    "source_event": asdict(layer.source_event) if layer.source_event else None,
                    "audience": layer.audience,
                }
                for layer in self.layers
            ],
            "policy": {"audience": self.audience, "who": self.audience_who,
                       "withheld": [{"section": wh.section, "reason": wh.skip_reason} for wh in self.withheld]},
            "backend": {"id": self.backend_id, "context": self.backend_context, "tokens": self.backend_tokens,
                        "place": self.backend_place, "withheld": self.backend_withheld},
            "history_messages": len(self.history),
            "history_dropped": self.history_dropped,
            "tools": self.tool_names,
            "tool_origins": self.tool_origins,
            "messages": list(self.messages),
            "total_tokens": self.total_tokens,
        }


def assembly_to_record(assembly: PromptAssembly) -> dict[str, Any]:
    """Everything in an assembly as plain JSON data (stored with its chat; :func:`assembly_from_record` inverts)."""
    return asdict(assembly)


def assembly_from_record(record: dict[str, Any]) -> PromptAssembly:
    """The assembly :func:`assembly_to_record` saved. Raises KeyError/TypeError/ValueError on a malformed one."""
    layers = []
    for raw in record["layers"]:
        layer = dict(raw)
        source = layer.get("source_event")
        if source is not None:
            layer["source_event"] = SourceEvent(str(source["event_id"]), int(source["created_at"]),
                                                tuple(source.get("relays") or ()))
        layers.append(PromptLayer(**layer))
    fields = dict(record)
    fields.update(layers=tuple(layers), history=tuple(record["history"]), tools=tuple(record["tools"]),
                  messages=tuple(record["messages"]), extra=dict(record.get("extra") or {}))
    return PromptAssembly(**fields)
