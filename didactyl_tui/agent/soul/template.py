"""The soul template: the prompt as data.

A template is an ordered list of sections — ``section`` (name), ``role``, ``skip_if_empty``, either
``tool`` (a context tool whose ``content`` becomes the text) or ``content`` (static text), and optionally
``audience`` (``admin`` or ``everyone``: who may read it; unset, the tool's own declaration decides and static text
is for everyone — agent/audience.py). It comes from ``[[soul.sections]]`` in the config, else from ``[soul] file``
(the original list format: ``- section: NAME`` / ``role:`` / ``tool:`` / ``skip_if_empty:`` / ``content:`` /
``audience:`` lines), else the built-in default below. Its assembly into the prompt is :mod:`.assembly`'s.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config import SoulConfig
from ...config_file import config_error
from ...errors import ConfigError
from ..audience import Audience, read_audience
from ..tools.registry import Tool

ROLES = ("system", "user", "assistant")

DEFAULT_PERSONA = """\
You are didactyl, an AI agent whose identity and memory live on Nostr. You talk with your admin in a \
terminal and you remember across conversations by writing your own memory.

Your memory:
- Short-term memory is shown to you below in every prompt (under "## Short-Term Memory", with its size \
against its limit). Keep there what you need in every conversation: current tasks, commitments, \
key facts about your admin (type="short_term").
- Long-term memory is larger and not shown automatically: read it with my_memory() when the \
conversation may need older knowledge (type="long_term").
- Change a memory with memory_insert(type, new_str) to add lines (at the end, or after insert_line) and \
memory_replace(type, old_str, new_str) to change or delete one passage, copied exactly: the rest stays \
as it is. memory_save(type, content) replaces the whole memory: use it to rewrite or reorganise one. \
Both memories are encrypted to your own key and published to your relays; keep them concise and current.
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
    audience: Audience | None = None  # None: the tool's declared audience; static text is for everyone

    def audience_for(self, tool: Tool | None) -> Audience:
        """Who may read this section: as the soul says, else as its tool is declared (a tool the registry does not
        know: the admin only); static text: everyone."""
        if self.audience is not None:
            return self.audience
        if self.tool:
            return tool.audience if tool is not None else Audience.ADMIN
        return Audience.EVERYONE


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
            s("agent_contacts", "system", tool="nostr_agent_contacts"),
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

_KEYS = ("section", "role", "tool", "skip_if_empty", "content", "audience")
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
            audience=read_audience(item.get("audience")),
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
                audience=read_audience(sec.audience),
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


def section_tool_problem(tool: Tool) -> str | None:
    """Why ``tool`` can never feed a soul section, or None. A section calls its tool with no arguments,
    synchronously, from the caches: the linter refuses what fails this, and assembly skips it with this reason."""
    if tool.parameters.get("required"):
        return f"tool {tool.name!r} needs parameters, which a section cannot give"
    if inspect.iscoroutinefunction(tool.handler):
        return f"tool {tool.name!r} is async; a section needs a cache-only tool"
    return None
