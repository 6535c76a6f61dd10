"""The soul template as an addressable Nostr event (kind 31120), NIP-44 encrypted to the agent itself.

Pure: the caller passes the key, ``created_at`` and (for tests) the nonce. The format is documented in
docs/soul-event.md: tags ``["d","soul"]``, ``["app","didactyl"]`` and, when the content is encrypted,
``["encrypted","nip44"]``; the content (after decryption) is the JSON document
``{"format": "didactyl-soul/1", "sections": [{"section", "role", "tool" | "content", "skip_if_empty"}]}``.
Liberal on read: a soul written as the seeds write it (the original section list) is read too; we publish JSON.

Reading checks the kind, the author (only the agent's own soul is read), the ``d`` tag, the id and
signature, the size and every section (as a config soul is checked); a failure is a :class:`SoulEventError`
naming the event and, where it applies, the section.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import AgentError, ConfigError, NostrError
from ..nostr import nip44
from ..nostr.event import Event, sign_event
from ..nostr.keys import SecretKey
from ..nostr.kinds import SOUL
from .memory.lineage import prev_tags
from .soul import ROLES, SoulTemplate, TemplateSection, check_section, parse_soul_list
from .soul_lint import check_soul
from .tools.registry import ToolRegistry

SOUL_FORMAT = "didactyl-soul/1"
SOUL_D_TAG = "soul"
APP_TAG = ("app", "didactyl")
ENCRYPTED_TAG = ("encrypted", "nip44")
MAX_SECTIONS = 64  # a soul is a prompt outline; hundreds of sections are a mistake or an attack
MAX_SECTION_NAME_CHARS = 64
MAX_SOUL_BYTES = nip44.MAX_PLAINTEXT_BYTES  # the encrypted form's limit applies to the plain one too
_KEYS = frozenset({"section", "role", "tool", "content", "skip_if_empty"})
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


def soul_from_text(text: str, source: str) -> SoulTemplate:
    """Liberal on read: a ``didactyl-soul/1`` JSON document (what we publish) or the seeds' section list
    (``- section: NAME`` / ``role:`` / ``tool:`` / ``skip_if_empty:`` / ``content:``), as another client may
    write it. Both get the same bounds; a failure is a :class:`SoulEventError` naming ``source``."""
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
    for key in ("section", "role", "tool", "content"):
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
                          skip_if_empty=item.get("skip_if_empty", True))
    try:
        return check_section(sec, f"{source}, section #{n}")
    except ConfigError as exc:
        raise SoulEventError(exc.message) from None


def build_soul_event(sk: SecretKey, template: SoulTemplate, *, created_at: int, encrypt: bool = True,
                     nonce: bytes | None = None, base: str | None = None) -> Event:
    """The signed kind 31120 holding ``template`` (encrypted to ``sk``'s own key unless ``encrypt=False``);
    ``base``: the version it was edited from (``["prev", id]``, as memory's)."""
    text = soul_to_json(template)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SOUL_BYTES:
        raise SoulEventError(f"the soul is {size:,} bytes as JSON; at most {MAX_SOUL_BYTES:,} fit in one event")
    tags: list[tuple[str, ...]] = [("d", SOUL_D_TAG), APP_TAG]
    if encrypt:
        key = nip44.get_conversation_key(sk.secret_hex(), sk.public_key_hex)
        content = nip44.encrypt(text, key, nonce)
        tags.append(ENCRYPTED_TAG)
    else:
        content = text
    return sign_event(sk, kind=SOUL, content=content, created_at=created_at, tags=[*tags, *prev_tags(base)])


def soul_filter(pubkey: str) -> dict[str, Any]:
    """The query for the agent's soul (the newest version wins, NIP-01)."""
    return {"kinds": [SOUL], "authors": [pubkey], "#d": [SOUL_D_TAG]}


def read_soul_event(ev: Event, sk: SecretKey) -> SoulTemplate:
    """Check and decode a kind 31120 of ``sk``'s own (either form, :func:`soul_from_text`); the template's source
    is ``soul event <id>``."""
    return soul_from_text(soul_event_text(ev, sk), f"soul event {ev.id[:12]}")


def soul_event_text(ev: Event, sk: SecretKey) -> str:
    """The document a kind 31120 of ``sk``'s own holds (checked, decrypted; not parsed)."""
    source = f"soul event {ev.id[:12]}"
    if ev.kind != SOUL:
        raise SoulEventError(f"{source}: kind {ev.kind}, not a kind {SOUL} soul")
    if ev.pubkey != sk.public_key_hex:
        raise SoulEventError(f"{source}: written by {ev.pubkey[:12]}…, not by this agent")
    if ev.d_tag != SOUL_D_TAG:
        raise SoulEventError(f"{source}: d tag {ev.d_tag!r}, expected {SOUL_D_TAG!r}")
    try:
        ev.check()
    except NostrError as exc:
        raise SoulEventError(f"{source}: {exc.message}") from None
    if ENCRYPTED_TAG in ev.tags:
        try:
            key = nip44.get_conversation_key(sk.secret_hex(), sk.public_key_hex)
            text = nip44.decrypt(ev.content, key)
        except NostrError as exc:
            raise SoulEventError(f"{source}: cannot decrypt: {exc.message}") from None
    else:
        text = ev.content
        if len(text.encode("utf-8", "surrogatepass")) > MAX_SOUL_BYTES:
            raise SoulEventError(f"{source}: larger than {MAX_SOUL_BYTES:,} bytes")
    return text


# --- which soul to use on start ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SoulChoice:
    """The soul to assemble with, where it came from, and what the start-up should tell the user."""

    template: SoulTemplate
    event: Event | None  # the kind 31120 it was read from; None: the initial (config/file/built-in) soul
    publish_initial: bool  # no soul on the relays yet: publish the initial one (the intent) once
    warnings: tuple[str, ...]


def choose_soul(initial: SoulTemplate, events: Iterable[Event], sk: SecretKey,
                registry: ToolRegistry) -> SoulChoice:
    """The relays are the truth, the config is the initial intent.

    The newest of the agent's kind 31120 souls that reads and lints clean wins; each newer one refused
    on the way is a warning naming the event and the section. With none on the relays the initial soul
    is used and should be published; with only refused ones it is used but not published (publishing
    would overwrite a soul the user may want to fix rather than lose).
    """
    mine = [ev for ev in events if ev.kind == SOUL and ev.pubkey == sk.public_key_hex and ev.d_tag == SOUL_D_TAG]
    mine.sort(key=lambda ev: (-ev.created_at, ev.id))  # NIP-01: newest first, ties to the lowest id
    warnings: list[str] = []
    for ev in mine:
        try:
            return SoulChoice(check_soul(read_soul_event(ev, sk), registry), ev, False, tuple(warnings))
        except AgentError as exc:
            warnings.append(soul_refusal(ev, exc))
    return SoulChoice(check_soul(initial, registry), None, not mine, tuple(warnings))


def soul_refusal(ev: Event, exc: AgentError) -> str:
    """Why ``ev`` is not used, naming the event and (where it applies) the section."""
    return exc.message if isinstance(exc, SoulEventError) else f"soul event {ev.id[:12]}: {exc}"
