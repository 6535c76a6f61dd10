"""Relays with their live connection state and how many bad events each one sent (dropped)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from textual.content import Content
from textual.widgets import Static

if TYPE_CHECKING:
    from ...service.types import ConnectionState

_STATE_STYLE = {
    "connected": "$text-success",
    "connecting": "$text-warning",
    "backoff": "$text-warning",
    "disconnected": "$text-error",
    "closed": "$text-muted",
}


class RelayList(Static):
    """``● label  state  dropped N (reason n, …)`` per relay. The screen calls :meth:`show_relays`."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(Content("no relays yet"), id=id, classes="relay-list")
        self.states: dict[str, str] = {}
        self.dropped: dict[str, dict[str, int]] = {}
        self.labels: dict[str, str] = {}

    def show_relays(
        self,
        states: Mapping[str, ConnectionState],
        dropped: Mapping[str, Mapping[str, int]] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """``labels`` replaces a URL on screen (the embedded relay's changing port is noise)."""
        self.states = {url: s.value for url, s in states.items()}
        self.dropped = {url: dict(c) for url, c in (dropped or {}).items()}
        if labels is not None:
            self.labels = dict(labels)
        self.update(self._render_lines())

    @property
    def connected(self) -> int:
        return sum(1 for s in self.states.values() if s == "connected")

    def _render_lines(self) -> Content:
        if not self.states:
            return Content("no relays")
        lines: list[Content] = []
        for url, state in self.states.items():
            parts: list[str | tuple[str, str]] = [
                ("● ", _STATE_STYLE.get(state, "$text-muted")),
                self.labels.get(url, url),
                (f"  {state}", "$text-muted"),
            ]
            counts = {k: v for k, v in self.dropped.get(url, {}).items() if v}
            if counts:
                detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                parts.append((f"  dropped {sum(counts.values())} ({detail})", "$text-warning"))
            lines.append(Content.assemble(*parts))
        return Content("\n").join(lines)
