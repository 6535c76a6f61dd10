"""A one-line gauge of a memory's size: characters (and UTF-8 bytes) against its limit."""

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
    """``━━━━━──── 1,234/8,000 chars · 1,290 B``; the bar turns to the error colour over the limit."""

    chars: reactive[int] = reactive(0)
    utf8_bytes: reactive[int] = reactive(0)
    limit: reactive[int] = reactive(1)

    def __init__(self, limit: int = 1, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.set_reactive(MemoryGauge.limit, max(1, limit))

    @property
    def over_limit(self) -> bool:
        return self.chars > self.limit or self.utf8_bytes > NIP44_MAX_BYTES

    def show(self, chars: int, utf8_bytes: int, limit: int | None = None) -> None:
        if limit is not None:
            self.limit = max(1, limit)
        self.chars = chars
        self.utf8_bytes = utf8_bytes
        self.set_class(self.over_limit, "-over")

    def show_text(self, text: str, limit: int | None = None) -> None:
        self.show(*measure(text), limit)

    def render(self) -> Content:
        label = f" {self.chars:,}/{self.limit:,} chars · {self.utf8_bytes:,} B"
        width = max(0, self.size.width - len(label))
        filled = min(width, round(width * self.chars / self.limit)) if width else 0
        used_style = "$error" if self.over_limit else "$primary"
        label_style = "$text-error" if self.over_limit else "$text-muted"
        return Content.assemble(
            ("━" * filled, used_style),
            ("─" * (width - filled), "$panel-lighten-2"),
            (label, label_style),
        )
