"""The codecs of the soul, the task list and the self-context the agent publishes (profile, contacts, relay list),
and :func:`build_codecs`, the one table of every document's codec. Memory's codec is in :mod:`.codec`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...config_file import relay_url_problem
from ...errors import AgentError, ConfigError
from ...nostr.event import Event
from ...nostr.keys import is_hex_pubkey
from ..soul.content import MAX_SOUL_BYTES, read_soul_text, soul_to_json
from ..soul.lint import check_soul
from ..soul.template import SoulTemplate
from ..tasks.task_list import MAX_TASKS_BYTES, TaskError, TaskList
from ..tools.registry import ToolRegistry
from .codec import NIP44_MAX_BYTES, PUBLIC_MAX_BYTES, DocumentCodec, DocumentError, Encoded, MemoryCodec, check_size
from .keys import DocumentKey
from .lineage import PREV_TAG


class SoulCodec(DocumentCodec[SoulTemplate]):
    """Kind 31120: the ``didactyl-soul/1`` JSON document (docs/soul-event.md); the seeds' section list is read too.
    A soul must lint clean against the tools this agent has (a section naming a tool it lacks cannot render)."""

    key = DocumentKey.SOUL
    limit_chars = MAX_SOUL_BYTES
    marks_encryption = True

    def __init__(self, registry: ToolRegistry, initial: SoulTemplate) -> None:
        self._registry, self._initial = registry, initial

    def empty(self) -> SoulTemplate:
        return self._initial  # the config's (or the built-in) soul: the intent, until the relays hold one

    def _read(self, source: str, text: str) -> SoulTemplate:
        try:
            return check_soul(read_soul_text(source, text), self._registry)
        except (AgentError, ConfigError) as exc:
            raise DocumentError(exc.message, "Bad soul") from None

    def from_text(self, text: str, current: SoulTemplate, now: int) -> SoulTemplate:
        check_size(self.title, text, self.limit_chars)
        return self._read("the edited soul", text)

    def to_text(self, value: SoulTemplate) -> str:
        return soul_to_json(value)

    def encode(self, value: SoulTemplate) -> Encoded:
        try:
            check_soul(value, self._registry)  # what is published lints clean, whoever built it
        except AgentError as exc:
            raise DocumentError(exc.message, "Bad soul") from None
        text = soul_to_json(value)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_SOUL_BYTES:
            raise DocumentError(f"the soul is {size:,} bytes as JSON; at most {MAX_SOUL_BYTES:,} fit in one event",
                                "Bad soul")
        return Encoded(text)

    def decode(self, plaintext: str, ev: Event) -> SoulTemplate:
        return self._read(f"soul event {ev.id[:12]}", plaintext)


class TasksCodec(DocumentCodec[TaskList]):
    """Kind 30078 ``d = tasks``: the ``didactyl-tasks/1`` JSON (docs/tasks.md); edited one task a line."""

    key = DocumentKey.TASKS
    limit_chars = MAX_TASKS_BYTES

    def empty(self) -> TaskList:
        return TaskList()

    def from_text(self, text: str, current: TaskList, now: int) -> TaskList:
        try:
            return TaskList.from_json(text).touched(current, now)
        except TaskError as exc:
            raise DocumentError(exc.message.replace("the stored task list", "the task list"), "Tasks") from None

    def to_text(self, value: TaskList) -> str:
        return value.to_text()

    def encode(self, value: TaskList) -> Encoded:
        try:
            return Encoded(value.to_json())
        except TaskError as exc:
            raise DocumentError(exc.message, "Tasks") from None

    def decode(self, plaintext: str, ev: Event) -> TaskList:
        try:
            return TaskList.from_json(plaintext)
        except TaskError as exc:
            raise DocumentError(f"{self.where(ev)}: {exc.message}", "Tasks") from None


class ProfileCodec(DocumentCodec[dict[str, Any]]):
    """Kind 0: a JSON object (name, about, picture, nip05…); edited as that object, one field a line."""

    key = DocumentKey.PROFILE
    limit_chars = PUBLIC_MAX_BYTES
    writes_base = False

    def empty(self) -> dict[str, Any]:
        return {}

    def _object(self, text: str, where: str) -> dict[str, Any]:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise DocumentError(f"{where}: the profile is not valid JSON", "Profile") from None
        if not isinstance(data, dict):
            raise DocumentError(f"{where}: the profile must be a JSON object", "Profile")
        return data

    def from_text(self, text: str, current: dict[str, Any], now: int) -> dict[str, Any]:
        check_size(self.title, text, self.limit_chars, PUBLIC_MAX_BYTES)
        return self._object(text, "the edited profile")

    def to_text(self, value: dict[str, Any]) -> str:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1) + "\n"

    def encode(self, value: dict[str, Any]) -> Encoded:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        check_size(self.title, text, PUBLIC_MAX_BYTES, PUBLIC_MAX_BYTES)
        return Encoded(text)

    def decode(self, plaintext: str, ev: Event) -> dict[str, Any]:
        return self._object(plaintext, self.where(ev))


@dataclass(frozen=True, slots=True)
class TagList:
    """A contact list (kind 3) or relay list (kind 10002): the event's tags, as they are, and its content (kind 3's
    may hold a legacy relay map). Every tag is kept: a client that added one must not lose it to us."""

    tags: tuple[tuple[str, ...], ...] = ()
    content: str = ""

    def values(self, name: str) -> list[str]:
        return [t[1] for t in self.tags if len(t) >= 2 and t[0] == name]


class TagListCodec(DocumentCodec[TagList]):
    """Contacts (``p`` tags) and the relay list (``r`` tags), edited as ``{"content": …, "tags": [...]}`` with one
    tag a line, so a line merge adds or drops one entry."""

    limit_chars = PUBLIC_MAX_BYTES
    writes_base = False

    def __init__(self, key: DocumentKey) -> None:
        self.key = key
        self._letter = "p" if key is DocumentKey.CONTACTS else "r"

    def empty(self) -> TagList:
        return TagList()

    def from_text(self, text: str, current: TagList, now: int) -> TagList:
        check_size(self.title, text, self.limit_chars, PUBLIC_MAX_BYTES)
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise DocumentError(f"the {self.title.lower()} is not valid JSON", self.title) from None
        if not isinstance(data, dict) or not isinstance(data.get("tags", []), list) \
                or not isinstance(data.get("content", ""), str):
            raise DocumentError(f'the {self.title.lower()} must be {{"content": "…", "tags": [[…], …]}}', self.title)
        tags: list[tuple[str, ...]] = []
        for n, tag in enumerate(data.get("tags", []), 1):
            if not isinstance(tag, list) or not tag or not all(isinstance(x, str) for x in tag):
                raise DocumentError(f"tag #{n} must be a list of strings", self.title)
            if tag[0] == self._letter:
                self._check_entry(tag, n)
            tags.append(tuple(tag))
        return TagList(tuple(tags), data.get("content", ""))

    def _check_entry(self, tag: list[str], n: int) -> None:
        if len(tag) < 2:
            raise DocumentError(f"tag #{n} has no value", self.title)
        if self._letter == "p" and not is_hex_pubkey(tag[1]):
            raise DocumentError(f"tag #{n}: {tag[1][:70]!r} is not a public key (64 hex characters)", self.title)
        if self._letter == "r":
            problem = relay_url_problem(tag[1])
            if problem:
                raise DocumentError(f"tag #{n}: {tag[1][:70]!r} {problem}", self.title)
            if len(tag) >= 3 and tag[2] not in ("read", "write"):
                raise DocumentError(f"tag #{n}: the marker must be read or write, not {tag[2][:20]!r}", self.title)

    def to_text(self, value: TagList) -> str:
        rows = ",\n".join(" " + json.dumps(list(t), ensure_ascii=False) for t in value.tags)
        head = '{"content": ' + json.dumps(value.content, ensure_ascii=False) + ', "tags": ['
        return f"{head}\n{rows}\n]}}\n" if rows else f"{head}]}}\n"

    def encode(self, value: TagList) -> Encoded:
        size = len(value.content.encode("utf-8", "surrogatepass")) + sum(len(x) for t in value.tags for x in t)
        if size > PUBLIC_MAX_BYTES:
            raise DocumentError(f"the {self.title.lower()} is about {size:,} bytes; at most {PUBLIC_MAX_BYTES:,} "
                                "fit in one event", self.title)
        return Encoded(value.content, value.tags)

    def decode(self, plaintext: str, ev: Event) -> TagList:
        return TagList(tuple(tuple(t) for t in ev.tags if not (t and t[0] == PREV_TAG)), plaintext)


def build_codecs(*, limits: Mapping[DocumentKey, int], registry: ToolRegistry, initial_soul: SoulTemplate,
                 memory_max_bytes: int = NIP44_MAX_BYTES,
                 memory_bytes_bound: str | None = None) -> dict[DocumentKey, DocumentCodec[Any]]:
    """Every document's codec (``limits``: the memories' character limits from the config; ``memory_max_bytes``:
    less than NIP-44's when the key is in a remote signer, named by ``memory_bytes_bound``)."""
    return {
        DocumentKey.SHORT_TERM: MemoryCodec(DocumentKey.SHORT_TERM, limits[DocumentKey.SHORT_TERM],
                                            memory_max_bytes, memory_bytes_bound),
        DocumentKey.LONG_TERM: MemoryCodec(DocumentKey.LONG_TERM, limits[DocumentKey.LONG_TERM],
                                           memory_max_bytes, memory_bytes_bound),
        DocumentKey.SOUL: SoulCodec(registry, initial_soul),
        DocumentKey.TASKS: TasksCodec(),
        DocumentKey.PROFILE: ProfileCodec(),
        DocumentKey.CONTACTS: TagListCodec(DocumentKey.CONTACTS),
        DocumentKey.RELAYS: TagListCodec(DocumentKey.RELAYS),
    }
