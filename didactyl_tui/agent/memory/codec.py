"""Short- and long-term memory as documents: markdown text, as it is (the document model is agent/documents)."""

from __future__ import annotations

from ...nostr.event import Event
from ..documents.codec import NIP44_MAX_BYTES, DocumentCodec, Encoded, check_size
from ..documents.keys import DocumentKey


class MemoryCodec(DocumentCodec[str]):
    """Short- and long-term memory: markdown text, as it is."""

    def __init__(self, key: DocumentKey, limit_chars: int, max_bytes: int = NIP44_MAX_BYTES,
                 bytes_bound: str | None = None) -> None:
        self.key, self.limit_chars = key, int(limit_chars)
        # A remote signer (NIP-46) carries less than NIP-44 allows: refused here, before anything is sent.
        self.max_bytes, self.bytes_bound = int(max_bytes), bytes_bound

    def _checked(self, text: str) -> str:
        return check_size(self.title, text, self.limit_chars, self.max_bytes, heading="Memory over limit",
                          bytes_bound=self.bytes_bound)

    def empty(self) -> str:
        return ""

    def from_text(self, text: str, current: str, now: int) -> str:
        return self._checked(text)

    def to_text(self, value: str) -> str:
        return value

    def encode(self, value: str) -> Encoded:
        return Encoded(self._checked(value))

    def decode(self, plaintext: str, ev: Event) -> str:
        return plaintext  # another writer's longer text is still the memory (the gauge shows it over)
