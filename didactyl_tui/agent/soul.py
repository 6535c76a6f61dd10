"""The soul template: the prompt as data, and its assembly into a layered :class:`PromptAssembly`.

A template is an ordered list of sections — ``section`` (name), ``role``, ``skip_if_empty`` and either
``tool`` (a context tool whose ``content`` becomes the text) or ``content`` (static text). It comes from
``[[soul.sections]]`` in the config, else from ``[soul] file`` (the original list format:
``- section: NAME`` / ``role:`` / ``tool:`` / ``skip_if_empty:`` / ``content:`` lines), else the built-in
default below.

Assembly is pure: it reads caches through the context tools' handlers (which never touch the network)
and returns every section with its role, source tool, content, token count and skip reason, then the
history, the memory backend's context and the user's message.

A tool-fed section shows what the tool returns: its ``content`` when it gives one, else its whole result as
the model would read it (JSON); its ``note`` — a remark for the model's own call when there is nothing, such
as "No contacts yet" — is never text that defeats ``skip_if_empty``: an empty section with ``skip_if_empty``
is skipped, and one without shows the note.

What is sent (``PromptAssembly.messages``, exactly): consecutive *system* sections merged into one
system message (joined by a blank line) — many chat templates accept a single leading system message
only — then user/assistant sections as their own messages, the history, and finally the user's message.
The memory backend's context goes where ``backend_place`` says: ``"system"`` (the default, as the Skald
design has it: prepended to the extra system context, i.e. at the end of the leading system message, after
the soul's system sections and before any user/assistant section) or ``"after_history"`` (one system message
after the history: the dynamic tail, so providers' prefix caching keeps working on everything before it).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import SoulConfig, config_error
from ..errors import ConfigError, DidactylError
from .prompt_record import PromptAssembly, PromptLayer, SourceEvent
from .tokens import count_tokens, message_text
from .tools.registry import Tool, ToolContext, ToolRegistry, render_result

ROLES = ("system", "user", "assistant")
BACKEND_PLACES = ("system", "after_history")  # where the memory backend's context goes ([memory] backend_context)
BACKEND_SECTION = "memory_backend"  # the name its layer has in the inspector

DEFAULT_PERSONA = """\
You are didactyl, an AI agent whose identity and memory live on Nostr. You talk with your admin in a \
terminal and you remember across conversations by writing your own memory.

Your memory:
- Short-term memory is shown to you below in every prompt (under "## Short-Term Memory", with its size \
against its limit). Keep there what you need in every conversation: current tasks, commitments, \
key facts about your admin. Update it with memory_save(type="short_term", content=...).
- Long-term memory is larger and not shown automatically: read it with my_memory() when the \
conversation may need older knowledge, and update it with memory_save(type="long_term", content=...).
- A save replaces the whole memory: read it, edit it, save the complete new text. Both memories are \
encrypted to your own key and published to your relays; keep them concise and current.
- File memory: read_file(path) and write_file(path, content) keep longer markdown notes in your \
memory folder.
- Tasks: your open tasks are shown below (under "## Tasks (open)"); keep them with task_add, \
task_update (status, note), task_remove and task_list.

Your self-knowledge: the sections below show your admin's and your own Nostr identity, profile, \
contacts, relays and latest notes, as cached from the relays. The tools agent_identity, \
nostr_agent_profile, nostr_agent_contacts, nostr_agent_relays, nostr_agent_notes, my_npub and \
my_pubkey (and the nostr_admin_* tools for your admin) return the same, fresh from the cache.

Be direct and helpful. Say when you do not know something rather than guessing."""


@dataclass(frozen=True, slots=True)
class TemplateSection:
    section: str
    role: str = "system"
    tool: str | None = None
    content: str | None = None
    skip_if_empty: bool = True


@dataclass(frozen=True, slots=True)
class SoulTemplate:
    sections: tuple[TemplateSection, ...]
    source: str  # "built-in", "config", or the file's path

    @property
    def names(self) -> list[str]:
        return [s.section for s in self.sections]


def default_template() -> SoulTemplate:
    s = TemplateSection
    return SoulTemplate(
        (
            s("soul", "system", content=DEFAULT_PERSONA),
            s("admin_identity", "system", tool="admin_identity"),
            s("admin_profile", "system", tool="nostr_admin_profile"),
            s("admin_contacts", "system", tool="nostr_admin_contacts"),
            s("admin_relays", "system", tool="nostr_admin_relays"),
            s("admin_notes", "system", tool="nostr_admin_notes"),
            s("agent_identity", "system", tool="agent_identity"),
            s("agent_profile", "system", tool="nostr_agent_profile"),
            # Kept when empty: the model is told it follows no one (the tool's note), rather than left to wonder.
            s("agent_contacts", "system", tool="nostr_agent_contacts", skip_if_empty=False),
            s("agent_relays", "system", tool="nostr_agent_relays"),
            s("agent_notes", "system", tool="nostr_agent_notes"),
            s("short_term_memory", "system", tool="memory_short_term_read"),
            s("tasks", "system", tool="tasks_open_read"),
        ),
        "built-in",
    )


def check_section(sec: TemplateSection, where: str) -> TemplateSection:
    """A section's own shape (name, role, exactly one of tool/content); ``where`` starts the error."""
    if not sec.section.strip():
        raise ConfigError(f"{where}: a soul section needs a name (section = ...)", "Bad soul")
    if sec.role not in ROLES:
        raise ConfigError(f"{where}: section {sec.section!r}: role must be system, user or assistant, "
                          f"not {sec.role!r}", "Bad soul")
    if bool(sec.tool) == (sec.content is not None):
        raise ConfigError(f"{where}: section {sec.section!r} needs exactly one of tool or content", "Bad soul")
    return sec


# --- the original list format -----------------------------------------------------------------

_KEYS = ("section", "role", "tool", "skip_if_empty", "content")
_KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<dash>-\s+)?(?P<key>[A-Za-z_]+)\s*:\s?(?P<value>.*)$")


def _scalar(raw: str, where: str) -> str:
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return str(json.loads(value))
        except ValueError:
            raise ConfigError(f"{where}: bad quoted string {value}", "Bad soul") from None
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    return value


def _boolean(raw: str, where: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "yes", "on"):
        return True
    if value in ("false", "no", "off"):
        return False
    raise ConfigError(f"{where}: skip_if_empty must be true or false, not {raw.strip()!r}", "Bad soul")


def parse_soul_list(text: str, source: str = "soul file") -> SoulTemplate:
    """Read the original list format. ``content: |`` (or ``>``) starts an indented block."""
    items: list[dict[str, Any]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        where = f"{source}, line {i + 1}"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        m = _KEY_LINE.match(line)
        if not m:
            raise ConfigError(f"{where}: expected 'key: value' or '- section: NAME', got {stripped[:40]!r}",
                              "Bad soul")
        key, value = m.group("key"), m.group("value")
        if m.group("dash"):
            items.append({"_line": i + 1})
        if not items:
            raise ConfigError(f"{where}: a section starts with '- section: NAME'", "Bad soul")
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(_KEYS)})", "Bad soul")
        if key in items[-1]:
            raise ConfigError(f"{where}: {key!r} given twice in one section", "Bad soul")
        key_indent = len(m.group("indent")) + len(m.group("dash") or "")
        i += 1
        if key == "content" and value.strip() in ("|", ">", "|-", ">-", "|+", ">+"):
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > key_indent):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            indents = [len(b) - len(b.lstrip()) for b in block if b.strip()]
            cut = min(indents) if indents else 0
            body = [b[cut:] if b.strip() else "" for b in block]
            if value.strip().startswith(">"):
                paragraphs = "\n".join(body).split("\n\n")
                items[-1][key] = "\n".join(" ".join(p.split("\n")) for p in paragraphs)
            else:
                items[-1][key] = "\n".join(body)
        elif key == "skip_if_empty":
            items[-1][key] = _boolean(value, where)
        else:
            items[-1][key] = _scalar(value, where)
    sections = []
    for item in items:
        where = f"{source}, line {item.pop('_line')}"
        sections.append(check_section(TemplateSection(
            section=item.get("section", ""),
            role=item.get("role", "system") or "system",
            tool=item.get("tool") or None,
            content=item.get("content"),
            skip_if_empty=item.get("skip_if_empty", True),
        ), where))
    if not sections:
        raise ConfigError(f"{source}: no sections found", "Bad soul")
    return SoulTemplate(tuple(sections), source)


def load_soul_template(cfg: SoulConfig, *, config_path: Path | None = None,
                       base_dir: Path | None = None) -> SoulTemplate:
    """``[[soul.sections]]``, else ``[soul] file``, else the built-in default.

    A relative ``file`` is found beside the config file (or in ``base_dir``); errors name the config file.
    """
    if base_dir is None and config_path is not None:
        base_dir = config_path.parent
    if cfg.sections and cfg.file:
        raise config_error(config_path, "soul", "file", "set either file or [[soul.sections]], not both")
    if cfg.sections:
        out = []
        where = f"{config_path or 'config'}: [[soul.sections]]"
        for n, sec in enumerate(cfg.sections, 1):
            out.append(check_section(TemplateSection(
                section=sec.section,
                role=sec.role,
                tool=sec.tool or None,
                content=sec.content or None,  # "" is the config's "not set"
                skip_if_empty=sec.skip_if_empty,
            ), f"{where} #{n}"))
        return SoulTemplate(tuple(out), "config")
    if cfg.file:
        path = Path(cfg.file).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            text = path.read_text("utf-8")
        except OSError as exc:
            raise config_error(config_path, "soul", "file", f"cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise config_error(config_path, "soul", "file", f"{path} is not UTF-8 text") from None
        return parse_soul_list(text, str(path))
    return default_template()


# --- assembly -------------------------------------------------------------------------------


def section_tool_problem(tool: Tool) -> str | None:
    """Why ``tool`` can never feed a soul section, or None. A section calls its tool with no arguments,
    synchronously, from the caches: the linter refuses what fails this, and assembly skips it with this reason."""
    if tool.parameters.get("required"):
        return f"tool {tool.name!r} needs parameters, which a section cannot give"
    if inspect.iscoroutinefunction(tool.handler):
        return f"tool {tool.name!r} is async; a section needs a cache-only tool"
    return None


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | tuple | dict) and not value)


def section_text(result: Any) -> tuple[str, str]:
    """(text, note) a section shows for a tool's result: ``content`` when the tool gives one, else the whole result
    as the model reads it, "" when every value in it is empty; the ``note`` apart (the model's remark when there is
    nothing: shown only by a section that is kept when empty)."""
    if not isinstance(result, Mapping):
        return render_result(result), ""
    note = result.get("note")
    note = note if isinstance(note, str) else ""
    if "content" in result:
        content = result["content"]
        return (content if isinstance(content, str) else render_result(content)), note
    rest = {k: v for k, v in result.items() if k != "note"}
    return ("" if all(_empty(v) for v in rest.values()) else render_result(rest)), note


def _run_context_tool(tool: Tool, ctx: ToolContext | None) -> tuple[str, str, str | None]:
    """(text, note, error) from a context tool's handler, synchronously (soul sections read caches only)."""
    problem = section_tool_problem(tool)
    if problem is not None:
        return "", "", problem
    kwargs: dict[str, Any] = {}
    if tool.context_param is not None:
        if ctx is None:
            return "", "", f"tool {tool.name} needs a context"
        kwargs[tool.context_param] = ctx
    try:
        result = tool.handler(**kwargs)
    except DidactylError as exc:  # e.g. "no admin is configured": the reason the section is skipped
        return "", "", exc.message
    except Exception as exc:  # a tool bug must not break the prompt
        return "", "", f"tool error: {type(exc).__name__}: {exc}"
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        return "", "", f"tool {tool.name} is async; a soul section needs a cache-only tool"
    return (*section_text(result), None)


def _merge_messages(layers: Sequence[PromptLayer]) -> list[dict[str, Any]]:
    """Consecutive system sections become one system message; user/assistant sections stay apart."""
    out: list[dict[str, Any]] = []
    for layer in layers:
        if layer.skipped:
            continue
        if layer.role == "system" and out and out[-1]["role"] == "system":
            out[-1]["content"] = f"{out[-1]['content']}\n\n{layer.content}"
        else:
            out.append({"role": layer.role, "content": layer.content})
    return out


def assemble(
    template: SoulTemplate,
    *,
    model: str,
    registry: ToolRegistry,
    ctx: ToolContext | None,
    created_at: float,
    history: Sequence[Mapping[str, Any]] = (),
    history_dropped: int = 0,
    user_message: str | None = None,
    backend_id: str | None = None,
    backend_context: str | None = None,
    backend_tools: Sequence[Tool] = (),
    backend_place: str = "system",
    source_events: Mapping[str, SourceEvent] | None = None,
    soul_source: SourceEvent | None = None,
    dry_run: bool = False,
) -> PromptAssembly:
    """Build the prompt record and exactly the messages to send. Pure: no network, no clock.

    ``source_events`` maps a tool name to the Nostr event its content came from (documents, identity);
    ``soul_source`` is the soul's own version: the source of every literal-text section.
    Backend tools are offered after the registry's visible tools. ``backend_place``: see the module docstring.
    """
    if backend_place not in BACKEND_PLACES:
        raise ValueError(f"backend_place must be one of {', '.join(BACKEND_PLACES)}, not {backend_place!r}")
    layers: list[PromptLayer] = []
    sources = source_events or {}
    for sec in template.sections:
        source: SourceEvent | None = None
        if sec.tool:
            tool = registry.get(sec.tool)
            if tool is None:
                layers.append(PromptLayer(sec.section, sec.role, sec.tool, "", 0, True, f"unknown tool {sec.tool!r}"))
                continue
            text, note, error = _run_context_tool(tool, ctx)
            if error is not None:
                layers.append(PromptLayer(sec.section, sec.role, sec.tool, "", 0, True, error))
                continue
            if not text.strip() and not sec.skip_if_empty:
                text = note  # kept when empty: the tool's own words for "nothing"
            source = sources.get(tool.name)
        else:
            text = sec.content or ""
            source = soul_source
        if not text.strip() and sec.skip_if_empty:
            layers.append(PromptLayer(sec.section, sec.role, sec.tool, "", 0, True, "empty (skip_if_empty)", source))
            continue
        layers.append(PromptLayer(sec.section, sec.role, sec.tool, text, count_tokens(model, text), False, None,
                                  source if text.strip() else None))

    messages = _merge_messages(layers)
    context = backend_context if backend_context and backend_context.strip() else None
    backend_tokens = count_tokens(model, context) if context else 0
    if context and backend_place == "system":
        if messages and messages[0]["role"] == "system":
            messages[0]["content"] = f"{messages[0]['content']}\n\n{context}"
        else:
            messages.insert(0, {"role": "system", "content": context})
    history_msgs = tuple(dict(m) for m in history)
    messages.extend(history_msgs)
    history_tokens = sum(count_tokens(model, message_text(m)) for m in history_msgs)
    if context and backend_place == "after_history":
        messages.append({"role": "system", "content": context})
    user_tokens = 0
    if user_message is not None:
        messages.append({"role": "user", "content": user_message})
        user_tokens = count_tokens(model, user_message)

    tools = [*registry.openai_schemas(), *(t.openai_schema() for t in backend_tools if t.visible)]
    tools_tokens = count_tokens(model, json.dumps(tools, separators=(",", ":"))) if tools else 0
    section_tokens = sum(layer.tokens for layer in layers)
    total = section_tokens + history_tokens + backend_tokens + user_tokens + tools_tokens
    return PromptAssembly(
        model=model,
        created_at=created_at,
        layers=tuple(layers),
        history=history_msgs,
        history_dropped=history_dropped,
        backend_id=backend_id,
        backend_context=context,
        backend_tokens=backend_tokens,
        backend_place=backend_place,
        user_message=user_message,
        tools=tuple(tools),
        messages=tuple(messages),
        total_tokens=total,
        dry_run=dry_run,
        extra={
            "soul_source": template.source,
            "section_tokens": section_tokens,
            "history_tokens": history_tokens,
            "user_tokens": user_tokens,
            "tools_tokens": tools_tokens,
        },
    )
