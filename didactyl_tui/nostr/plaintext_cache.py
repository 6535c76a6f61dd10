"""Decrypted text kept for the process, by (peer, payload): a remote signer's decrypt is a round trip over relays,
so a payload decrypted before (or encrypted here) is never asked again. Bounded in entries and characters."""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_CACHE_ENTRIES = 4096
DEFAULT_CACHE_CHARS = 32 * 1024 * 1024


class PlaintextCache:
    """Decrypted text by (peer, payload), least recently used first out, bounded in entries and characters."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_ENTRIES, max_chars: int = DEFAULT_CACHE_CHARS) -> None:
        if max_entries < 0 or max_chars < 0:
            raise ValueError("cache bounds must be >= 0")
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.chars = 0
        self._items: OrderedDict[tuple[str, str], str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple[str, str]) -> str | None:
        text = self._items.get(key)
        if text is not None:
            self._items.move_to_end(key)
        return text

    def put(self, key: tuple[str, str], text: str) -> None:
        size = len(key[1]) + len(text)
        if size > self.max_chars or self.max_entries == 0:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self.chars -= len(key[1]) + len(old)
        self._items[key] = text
        self.chars += size
        while len(self._items) > self.max_entries or self.chars > self.max_chars:
            (_, payload), dropped = self._items.popitem(last=False)
            self.chars -= len(payload) + len(dropped)

    def clear(self) -> None:
        self._items.clear()
        self.chars = 0
