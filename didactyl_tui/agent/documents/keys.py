"""Which documents the agent keeps on Nostr, and the fixed facts of each: kind, ``d`` tag, title, encryption.

The one mapping from a document's key (``"short_term"``, ``"soul"``, ``"profile"``…) to the document: views, the
CLI and the tools name a document by its key; nothing else branches on which document it is.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from ...errors import AgentError
from ...nostr.kinds import APP_DATA, CONTACTS, METADATA, RELAY_LIST, SOUL


class DocumentKey(str, Enum):
    SHORT_TERM = "short_term"
    LONG_TERM = "long_term"
    SOUL = "soul"
    TASKS = "tasks"
    PROFILE = "profile"
    CONTACTS = "contacts"
    RELAYS = "relays"

    @property
    def kind(self) -> int:
        return _FACTS[self][0]

    @property
    def d_tag(self) -> str:
        """The ``d`` tag of an addressable document; "" for the replaceable kinds 0, 3 and 10002."""
        return _FACTS[self][1]

    # Shadows str.title() (this is a str enum): kept until the save pipeline's rewrite lands, which reads it in
    # many places; then renamed (issue #33).
    @property
    def title(self) -> str:  # type: ignore[override]
        return _FACTS[self][2]

    @property
    def is_memory(self) -> bool:
        return self in (DocumentKey.SHORT_TERM, DocumentKey.LONG_TERM)

    @property
    def private(self) -> bool:
        """Encrypted to the agent's own key (NIP-44); the self-context kinds are public by nature."""
        return self.kind in (APP_DATA, SOUL)

    def command(self, verb: str) -> str:
        """The command line that runs ``verb`` on this document (for hints in messages): ``didactyl soul history``,
        ``didactyl memory history --type short_term``."""
        if self.is_memory:
            return f"didactyl memory {verb} --type {self.value}"
        return f"didactyl {self.value} {verb}"

    def address(self, pubkey: str) -> str:
        """NIP-01's ``kind:pubkey:d`` (the outbox keys versions by it)."""
        return f"{self.kind}:{pubkey}:{self.d_tag}"

    def filter(self, pubkey: str) -> dict[str, Any]:
        flt: dict[str, Any] = {"authors": [pubkey], "kinds": [self.kind]}
        if self.d_tag:
            flt["#d"] = [self.d_tag]
        return flt

    @classmethod
    def parse(cls, value: Any) -> DocumentKey:
        """A key (``"soul"``), a memory's ``d`` tag (``"short_term_memory"``) or a DocumentKey; else AgentError."""
        if isinstance(value, DocumentKey):
            return value
        for key in cls:
            if value == key.value or (key.is_memory and value == key.d_tag):
                return key
        names = ", ".join(k.value for k in cls)
        raise AgentError(f"no document named {value!r}: the documents are {names}", "Documents")

    @classmethod
    def parse_memory(cls, value: Any) -> DocumentKey:
        """``"short_term"``/``"long_term"`` (or the d tag); anything else is an AgentError."""
        try:
            key = cls.parse(value)
        except AgentError:
            key = None
        if key is None or not key.is_memory:
            raise AgentError(f"memory type must be 'short_term' or 'long_term', not {value!r}", "Memory")
        return key

    @classmethod
    def of_event(cls, kind: int, d: str) -> DocumentKey | None:
        """The document an event of ``kind`` with ``d`` tag ``d`` is a version of (None: none of ours)."""
        return _BY_ADDRESS.get((kind, d if kind in (APP_DATA, SOUL) else ""))


MEMORIES = (DocumentKey.SHORT_TERM, DocumentKey.LONG_TERM)

_FACTS: dict[DocumentKey, tuple[int, str, str]] = {
    DocumentKey.SHORT_TERM: (APP_DATA, "short_term_memory", "Short-Term Memory"),
    DocumentKey.LONG_TERM: (APP_DATA, "long_term_memory", "Long-Term Memory"),
    DocumentKey.SOUL: (SOUL, "soul", "Soul"),
    DocumentKey.TASKS: (APP_DATA, "tasks", "Task list"),
    DocumentKey.PROFILE: (METADATA, "", "Profile"),
    DocumentKey.CONTACTS: (CONTACTS, "", "Contact list"),
    DocumentKey.RELAYS: (RELAY_LIST, "", "Relay list"),
}
_BY_ADDRESS = {(kind, d): key for key, (kind, d, _) in _FACTS.items()}
