"""The soul's document as it travels in its kind 31120 event (docs/soul-event.md): the JSON form we publish,
``{"format": "didactyl-soul/1", "sections": [{"section", "role", "tool" | "content", "skip_if_empty", "audience"?}]}``,
and a liberal reader that also takes the seeds' section list. Pure. The event itself (tags ``["d","soul"]``,
``["app","didactyl"]``, ``["encrypted","nip44"]``, NIP-44 to the agent) is the document model's: the soul's codec
(agent/soul/codec.py); a failure here is a :class:`SoulEventError` naming the source and the section.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ...errors import AgentError, ConfigError
from ...nostr import nip44
from ..audience import read_audience
from .template import ROLES, SoulTemplate, TemplateSection, check_section, parse_soul_list

SOUL_FORMAT = "didactyl-soul/1"
MAX_SECTIONS = 64  # a soul is a prompt outline; hundreds of sections are a mistake or an attack
MAX_SECTION_NAME_CHARS = 64
MAX_SOUL_BYTES = nip44.MAX_PLAINTEXT_BYTES  # the encrypted form's limit applies to the plain one too
_KEYS = frozenset({"section", "role", "tool", "content", "skip_if_empty", "audience"})
_LIST_START = re.compile(r"^\s*-\s+section\s*:", re.M)  # the seeds' section list starts a section so


class SoulEventError(AgentError):
    """A kind 31120 soul event could not be built or read; the message names the event and section."""

    title = "Soul event"


def soul_to_json(template: SoulTemplate) -> str:
    """The document stored in the event (stable key order, so equal souls give equal text)."""
    sections: list[dict[str, Any]] = []
    for sec in template.sections:
        item: dict[str, Any] = {"section": sec.section, "role": sec.role}
        if sec.tool:
            item["tool"] = sec.tool
        else:
            item["content"] = sec.content or ""
        item["skip_if_empty"] = sec.skip_if_empty
        if sec.audience is not None:  # only when the soul says so: an unmarked soul reads as it always did
            item["audience"] = sec.audience.value
        sections.append(item)
    return json.dumps({"format": SOUL_FORMAT, "sections": sections}, ensure_ascii=False, indent=1)


def soul_from_json(text: str, source: str) -> SoulTemplate:
    """Parse and check the document; ``source`` names it in errors and becomes the template's source."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise SoulEventError(f"{source}: the soul is not valid JSON") from None
    if not isinstance(data, dict) or data.get("format") != SOUL_FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise SoulEventError(f"{source}: not a {SOUL_FORMAT} document (format: {found!r})")
    items = data.get("sections")
    if not isinstance(items, list) or not items:
        raise SoulEventError(f"{source}: the soul has no sections")
    if len(items) > MAX_SECTIONS:
        raise SoulEventError(f"{source}: {len(items)} sections, at most {MAX_SECTIONS} allowed")
    return SoulTemplate(tuple(_section(item, n, source) for n, item in enumerate(items, 1)), source)


def _section(item: Any, n: int, source: str) -> TemplateSection:
    where = f"{source}, section #{n}"
    if not isinstance(item, dict):
        raise SoulEventError(f"{where}: a section must be a JSON object")
    name = item.get("section")
    if isinstance(name, str) and name:
        where = f"{source}, section {name!r}"
    unknown = sorted(set(item) - _KEYS)
    if unknown:
        raise SoulEventError(f"{where}: unknown key(s) {', '.join(unknown)}")
    for key in ("section", "role", "tool", "content", "audience"):
        if key in item and not isinstance(item[key], str):
            raise SoulEventError(f"{where}: {key} must be a string")
    if not isinstance(item.get("skip_if_empty", True), bool):
        raise SoulEventError(f"{where}: skip_if_empty must be true or false")
    if len(item.get("section", "")) > MAX_SECTION_NAME_CHARS:
        raise SoulEventError(f"{where}: a section name is at most {MAX_SECTION_NAME_CHARS} characters")
    if item.get("role", "system") not in ROLES:
        raise SoulEventError(f"{where}: role must be system, user or assistant, not {item.get('role')!r}")
    sec = TemplateSection(section=item.get("section", ""), role=item.get("role", "system"),
                          tool=item.get("tool") or None, content=item.get("content"),
                          skip_if_empty=item.get("skip_if_empty", True), audience=read_audience(item.get("audience")))
    try:
        return check_section(sec, f"{source}, section #{n}")
    except ConfigError as exc:
        raise SoulEventError(exc.message) from None


def read_soul_text(source: str, text: str) -> SoulTemplate:
    """Liberal on read: a soul in either form — our ``didactyl-soul/1`` JSON document (what we publish), or the seeds'
    section list (``- section: NAME`` / ``role:`` / ``tool:`` / ``skip_if_empty:`` / ``content:``), as another client
    may write it. Both get the same bounds; a failure is a :class:`SoulEventError` naming ``source`` (and the section
    or line). Linting comes after."""
    if text.lstrip().startswith(("{", "[")):
        return soul_from_json(text, source)
    if not _LIST_START.search(text):
        raise SoulEventError(f"{source}: not a soul: neither a {SOUL_FORMAT} JSON document nor a section list "
                             "('- section: NAME' lines)")
    try:
        template = parse_soul_list(text, source)
    except ConfigError as exc:
        raise SoulEventError(exc.message) from None
    if len(template.sections) > MAX_SECTIONS:
        raise SoulEventError(f"{source}: {len(template.sections)} sections, at most {MAX_SECTIONS} allowed")
    for sec in template.sections:
        if len(sec.section) > MAX_SECTION_NAME_CHARS:
            raise SoulEventError(f"{source}, section {sec.section[:MAX_SECTION_NAME_CHARS]!r}…: a section name is "
                                 f"at most {MAX_SECTION_NAME_CHARS} characters")
    return template
