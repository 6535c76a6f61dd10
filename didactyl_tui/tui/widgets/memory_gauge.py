"""A one-line gauge of a memory's size: characters (and UTF-8 bytes) against its limit; in the editor, its
tokens for the model in use too, against that model's context window when known. When the bytes have a bound of
their own below NIP-44's (40,960 when the agent's key is in a remote signer: NIP-44 inside NIP-44), the bytes are
shown against it, and the bar fills to whichever bound is nearer."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

# NIP-44 v2 caps a plaintext at 65,535 bytes, whatever the character limit says.
NIP44_MAX_BYTES = 65_535


def measure(text: str) -> tuple[int, int]:
    """(characters, UTF-8 bytes) of ``text``."""
    return len(text), len(text.encode("utf-8"))


class MemoryGauge(Widget):
    """``━━━━━──── 1,234/8,000 chars · 310/128,000 tok · 1,290 B`` (``1,290/40,960 B`` under a byte bound of its
    own); the bar turns to the error colour over either limit. Tokens show once counted (:meth:`show_tokens`), a
    ``~`` before them while the text changed since."""

    chars: reactive[int] = reactive(0)
    utf8_bytes: reactive[int] = reactive(0)
    limit: reactive[int] = reactive(1)
    max_bytes: reactive[int] = reactive(NIP44_MAX_BYTES)
    tokens: reactive[int | None] = reactive(None)
    token_cap: reactive[int | None] = reactive(None)  # the model's context window (None: not known)
    tokens_stale: reactive[bool] = reactive(False)

    def __init__(self, limit: int = 1, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.set_reactive(MemoryGauge.limit, max(1, limit))

    @property
    def over_limit(self) -> bool:
        return self.chars > self.limit or self.utf8_bytes > self.max_bytes

    @property
    def bytes_bounded(self) -> bool:
        """The bytes have a bound below NIP-44's own (a remote signer's): shown against it."""
        return self.max_bytes < NIP44_MAX_BYTES

    def show(self, chars: int, utf8_bytes: int, limit: int | None = None, max_bytes: int | None = None) -> None:
        if limit is not None:
            self.limit = max(1, limit)
        if max_bytes is not None:
            self.max_bytes = max(1, max_bytes)
        self.chars = chars
        self.utf8_bytes = utf8_bytes
        self.set_class(self.over_limit, "-over")

    def show_text(self, text: str, limit: int | None = None, max_bytes: int | None = None) -> None:
        self.show(*measure(text), limit, max_bytes)
        self.tokens_stale = self.tokens is not None

    def show_tokens(self, tokens: int, cap: int | None, *, estimated: bool = False) -> None:
        """The count of the text now shown (counted off the UI loop by the editor; ``estimated``: marked ~)."""
        self.tokens, self.token_cap, self.tokens_stale = tokens, cap, estimated

    def _token_label(self) -> str:
        if self.tokens is None:
            return ""
        counted = f"{'~' if self.tokens_stale else ''}{self.tokens:,}"
        return f" · {counted}/{self.token_cap:,} tok" if self.token_cap else f" · {counted} tok"

    def render(self) -> Content:
        size = f"{self.utf8_bytes:,}/{self.max_bytes:,} B" if self.bytes_bounded else f"{self.utf8_bytes:,} B"
        label = f" {self.chars:,}/{self.limit:,} chars{self._token_label()} · {size}"
        width = max(0, self.size.width - len(label))
        used = self.chars / self.limit
        if self.bytes_bounded:
            used = max(used, self.utf8_bytes / self.max_bytes)
        filled = min(width, round(width * used)) if width else 0
        used_style = "$error" if self.over_limit else "$primary"
        label_style = "$text-error" if self.over_limit else "$text-muted"
        return Content.assemble(
            ("━" * filled, used_style),
            ("─" * (width - filled), "$panel-lighten-2"),
            (label, label_style),
        )
