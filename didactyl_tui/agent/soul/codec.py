"""The soul as a document: kind 31120, the ``didactyl-soul/1`` JSON (docs/soul-event.md)."""

from __future__ import annotations

from ...errors import AgentError, ConfigError
from ...nostr.event import Event
from ..documents.codec import DocumentCodec, DocumentError, Encoded, check_size
from ..documents.keys import DocumentKey
from ..tools.registry import ToolRegistry
from .content import MAX_SOUL_BYTES, read_soul_text, soul_to_json
from .lint import check_soul
from .template import SoulTemplate


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
