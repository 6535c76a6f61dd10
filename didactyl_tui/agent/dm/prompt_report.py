"""The prompt report: how ``serve`` tells the admin what went into a reply's prompt, and how ``attach`` reads it.

After each reply in the admin's own conversation, ``serve`` sends the admin one more NIP-59 gift wrap (to the admin
only) whose rumor is of kind :data:`PROMPT_REPORT_KIND` (not 14: chat clients do not show it), tagged ``e`` = the
reply's rumor id and ``p`` = the admin, with an ``alt`` tag (NIP-31) saying what it is. Its content is JSON::

    {"v": 1, "model": ..., "created_at": ..., "total_tokens": ..., "history_messages": ..., "history_dropped": ...,
     "sections": [{"section", "role", "tool", "tokens", "skipped", "skip_reason", "source", "content", "cut",
                   "audience"}],
     "backend": {"id", "tokens", "place", "context", "cut", "withheld"}, "tools": [names], "usage": {...},
     "sections_left_off": n, "policy": {"audience", "who"},
     "tool_calls": [{"name", "arguments", "result", "result_cut", "error", "round", "keys_left_off"}],
     "tool_calls_left_off": n}

``tool_calls`` are the turn's calls, each with short arguments and its outcome (report_tool_calls.py), shown in the
attached conversation as the terminal shows its own; a reader of an older report finds none.

Bounded both ways: each text is cut to a number of characters (``cut`` says how many were left out) and the whole
content to :data:`MAX_REPORT_BYTES` (cutting the texts harder, then leaving sections off); a reader refuses what is
larger or malformed, and strips control characters from every text before a terminal can see it. docs/attach.md
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import AgentError
from ...nostr.nip17 import MAX_MESSAGE_BYTES
from ...nostr.nip59 import Rumor
from ...terminal_text import clean, one_line
from ..documents.versions import SourceEvent
from ..llm.usage import Usage
from ..soul.prompt_record import PromptAssembly, PromptLayer
from ..turn.events import ToolCallFinished
from .report_tool_calls import MAX_TOOL_CALLS, decode_tool_calls, encode_tool_calls

PROMPT_REPORT_KIND = 7078  # an app kind: inside a gift wrap, never published bare, shown by no chat client
REPORT_VERSION = 1
MAX_REPORT_BYTES = MAX_MESSAGE_BYTES  # the rumor travels sealed and wrapped like a DM: the same proven envelope
SECTION_CHARS = (4_000, 1_000, 200, 0)  # each text's bound, tried in turn until the report fits
MAX_SECTIONS = 128
MAX_TOOLS = 256
ALT = "didactyl prompt assembly for the admin (a reply's prompt, as sections)"


class ReportError(AgentError):
    """A prompt report that cannot be read (too large, not JSON, a field of the wrong type)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "Prompt report")


def _cut(text: str | None, limit: int) -> tuple[str, int]:
    text = text or ""
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def _section(layer: PromptLayer, limit: int) -> dict[str, Any]:
    content, cut = _cut(layer.content, limit)
    source = layer.source_event
    return {"section": layer.section, "role": layer.role, "tool": layer.tool, "tokens": layer.tokens,
            "skipped": layer.skipped, "skip_reason": layer.skip_reason, "content": content, "cut": cut,
            "audience": layer.audience,
            "source": None if source is None else {"event_id": source.event_id, "created_at": source.created_at,
                                                   "relays": list(source.relays)[:8]}}


@dataclass(frozen=True, slots=True)
class RemoteReport:
    """What a prompt report tells: the reply's prompt assembly, the model's usage, the turn's tool calls."""

    assembly: PromptAssembly
    usage: Usage | None
    tool_calls: tuple[ToolCallFinished, ...] = ()
    tool_calls_left_off: int = 0


def report_content(assembly: PromptAssembly, usage: Usage | None = None, *,
                   tool_calls: Sequence[ToolCallFinished] = (), max_bytes: int = MAX_REPORT_BYTES) -> str:
    """The report of ``assembly`` (and the turn's ``tool_calls``) as JSON text of at most ``max_bytes`` UTF-8 bytes.
    What does not fit is cut, texts first, then sections, then tool calls."""
    layers = list(assembly.layers)
    left_off = max(0, len(layers) - MAX_SECTIONS)
    layers = layers[:MAX_SECTIONS]
    calls = list(tool_calls)[:MAX_TOOL_CALLS]
    calls_left_off = len(tool_calls) - len(calls)
    history_tokens = assembly.extra.get("history_tokens") if assembly.extra else None
    while True:
        for limit in SECTION_CHARS:
            context, context_cut = _cut(assembly.backend_context, limit)
            body: dict[str, Any] = {
                "v": REPORT_VERSION, "model": assembly.model, "created_at": assembly.created_at,
                "total_tokens": assembly.total_tokens, "history_messages": len(assembly.history),
                "history_dropped": assembly.history_dropped, "history_tokens": history_tokens,
                "sections": [_section(layer, limit) for layer in layers],
                "backend": {"id": assembly.backend_id, "tokens": assembly.backend_tokens,
                            "place": assembly.backend_place, "context": context, "cut": context_cut,
                            "withheld": assembly.backend_withheld},
                "tools": assembly.tool_names[:MAX_TOOLS], "sections_left_off": left_off,
                "policy": {"audience": assembly.audience, "who": assembly.audience_who},
                "tool_calls": encode_tool_calls(calls, limit), "tool_calls_left_off": calls_left_off,
            }
            if usage is not None:
                body["usage"] = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                                 "cost_usd": usage.cost_usd}
            text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
            if len(text.encode("utf-8", "surrogatepass")) <= max_bytes:
                return text
        if layers:  # the texts are gone and it still does not fit: fewer sections
            left_off += (len(layers) + 1) // 2
            layers = layers[: len(layers) // 2]
        elif calls:  # then fewer tool calls
            calls_left_off += (len(calls) + 1) // 2
            calls = calls[: len(calls) // 2]
        else:  # the metadata alone does not fit: only a bound far too small gets here
            raise ReportError(f"a prompt report does not fit in {max_bytes:,} bytes")


def report_rumor(agent: str, admin: str, reply_id: str, content: str, *, created_at: int) -> Rumor:
    """The report's rumor from the agent to the admin, answering the reply ``reply_id``."""
    return Rumor.build(agent, kind=PROMPT_REPORT_KIND, content=content, created_at=created_at,
                       tags=[("p", admin), ("e", reply_id), ("alt", ALT)])


def _text(value: Any, limit: int, *, line: bool = False) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ReportError(f"a text field is {type(value).__name__}, not text")
    return one_line(value[:limit]) if line else clean(value[:limit])


def _int(value: Any, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportError(f"a number field is {type(value).__name__}")
    return max(0, int(value))


def _object(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ReportError(f"{what} is not an object")
    return value


def _audience(value: Any) -> str | None:
    """A section's audience as the agent named it (only the two known words; anything else: not said)."""
    return value if value in ("admin", "everyone") else None


def _layer(raw: Any) -> PromptLayer:
    item = _object(raw, "a section")
    content = _text(item.get("content"), SECTION_CHARS[0])
    cut = _int(item.get("cut"))
    if cut:
        content += f"\n… [{cut:,} more characters at the agent]"
    source = None
    if item.get("source") is not None:
        src = _object(item["source"], "a section's source")
        relays = src.get("relays") or []
        if not isinstance(relays, list):
            raise ReportError("a source's relays are not a list")
        source = SourceEvent(_text(src.get("event_id"), 64, line=True), _int(src.get("created_at")),
                             tuple(_text(r, 200, line=True) for r in relays[:8]))
    return PromptLayer(section=_text(item.get("section"), 80, line=True) or "?",
                       role=_text(item.get("role"), 16, line=True) or "system",
                       tool=_text(item.get("tool"), 80, line=True) or None, content=content,
                       tokens=_int(item.get("tokens")), skipped=bool(item.get("skipped")),
                       skip_reason=_text(item.get("skip_reason"), 200, line=True) or None, source_event=source,
                       audience=_audience(item.get("audience")))


def read_report(rumor: Rumor) -> RemoteReport:
    """The assembly a report describes, as the inspector shows it (texts cut where the agent cut them; the history
    as a count: its messages are the conversation itself), and the turn's tool calls. Raises :class:`ReportError`
    on a malformed report."""
    if rumor.kind != PROMPT_REPORT_KIND:
        raise ReportError(f"a kind {rumor.kind} rumor is not a prompt report")
    if len(rumor.content.encode("utf-8", "surrogatepass")) > MAX_REPORT_BYTES:
        raise ReportError(f"a prompt report is at most {MAX_REPORT_BYTES:,} bytes")
    try:
        body = json.loads(rumor.content)
    except ValueError:
        raise ReportError("a prompt report is not JSON") from None
    body = _object(body, "a prompt report")
    if body.get("v") != REPORT_VERSION:
        raise ReportError(f"a prompt report of version {body.get('v')!r} (this app reads {REPORT_VERSION})")
    sections = body.get("sections") or []
    tools = body.get("tools") or []
    if not isinstance(sections, list) or not isinstance(tools, list):
        raise ReportError("a prompt report's sections or tools are not a list")
    backend = _object(body.get("backend"), "the backend")
    policy = _object(body.get("policy"), "the policy")
    context = _text(backend.get("context"), SECTION_CHARS[0]) or None
    if context and _int(backend.get("cut")):
        context += f"\n… [{_int(backend.get('cut')):,} more characters at the agent]"
    created = body.get("created_at")
    extra: dict[str, Any] = {"remote": {"agent": rumor.pubkey, "reply_id": rumor.first_tag("e") or "",
                                        "history_messages": _int(body.get("history_messages")),
                                        "sections_left_off": _int(body.get("sections_left_off"))}}
    if body.get("history_tokens") is not None:
        extra["history_tokens"] = _int(body.get("history_tokens"))
    assembly = PromptAssembly(
        model=_text(body.get("model"), 200, line=True),
        created_at=float(created) if isinstance(created, int | float) and not isinstance(created, bool)
        else float(rumor.created_at),
        layers=tuple(_layer(raw) for raw in sections[:MAX_SECTIONS]), history=(),
        history_dropped=_int(body.get("history_dropped")), backend_id=_text(backend.get("id"), 80, line=True) or None,
        backend_context=context, backend_tokens=_int(backend.get("tokens")), user_message=None,
        tools=tuple({"type": "function", "function": {"name": _text(name, 80, line=True)}}
                    for name in tools[:MAX_TOOLS]),
        messages=(), total_tokens=_int(body.get("total_tokens")), extra=extra,
        backend_place="system" if backend.get("place") == "system" else "after_history",
        audience="guest" if policy.get("audience") == "guest" else "admin",
        audience_who=_text(policy.get("who"), 200, line=True),
        backend_withheld=_text(backend.get("withheld"), 300, line=True) or None)
    usage = None
    if body.get("usage") is not None:
        raw = _object(body["usage"], "the usage")
        cost = raw.get("cost_usd")
        usage = Usage(_int(raw.get("prompt_tokens")) if raw.get("prompt_tokens") is not None else None,
                      _int(raw.get("completion_tokens")) if raw.get("completion_tokens") is not None else None,
                      float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None)
    calls = decode_tool_calls(body.get("tool_calls"), rumor.first_tag("e") or rumor.id, ReportError)
    return RemoteReport(assembly, usage, calls, _int(body.get("tool_calls_left_off")))


def unavailable_assembly(reason: str, *, created_at: float, agent: str) -> PromptAssembly:
    """The inspector's entry for a remote turn whose assembly did not come: says so, guesses nothing."""
    return PromptAssembly(model="", created_at=created_at, layers=(), history=(), history_dropped=0, backend_id=None,
                          backend_context=None, backend_tokens=0, user_message=None, tools=(), messages=(),
                          total_tokens=0, extra={"remote": {"agent": agent, "unavailable": reason}})
