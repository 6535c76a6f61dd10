"""Each relay's answer to one memory publish, as lines for the editor and the history screen."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.content import Content

from ...service.labels import short_id
from ...terminal_text import one_line

if TYPE_CHECKING:
    from ...service.types import PublishOutcome


def verdict_lines(outcome: PublishOutcome, label: Callable[[str], str], *, head: str = "Saved") -> Content:
    """``Saved event 1a2b3c4d: accepted by 1/2 relays`` then ``● relay  verdict: reason`` per relay."""
    head_style = "$text-success" if outcome.any_accepted else "$text-error"
    accepted = len(outcome.accepted_by)
    parts: list[Content] = [Content.styled(
        f"{head} event {short_id(outcome.event_id)}: accepted by {accepted}/{len(outcome.results)} relays", head_style)]
    if not outcome.any_accepted:
        parts.append(Content.styled("  kept in the outbox: it is sent again as soon as a relay answers",
                                    "$text-warning"))
    for url, verdict in outcome.results.items():
        style = "$text-success" if verdict.accepted else "$text-error"
        reason = f": {one_line(verdict.message)}" if verdict.message else ""  # the relay's words
        parts.append(Content.assemble(("  ● ", style), label(url), (f"  {verdict.verdict.value}{reason}",
                                                                      "$text-muted")))
    return Content("\n").join(parts)
