"""What a reply path is, for the paths themselves and the widgets that hold them: which path
(:class:`ReplyPath`), the body of one message (:class:`ReplyBody`) and the entry widget it lives in
(:class:`ReplyHost`). The package's ``__init__`` chooses and builds a path from these; the paths import them from
here, not from the package that imports the paths."""

from __future__ import annotations

import enum
from abc import abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from textual.widget import Widget

if TYPE_CHECKING:
    from textual.widgets import Markdown


class ReplyPath(enum.Enum):
    FAST = "fast"
    PUBLIC = "public"


class ReplyHost(Widget):
    """The entry widget a body lives in (``widgets/message_entry.MessageEntry``): it owns the text; the body mounts
    its parts in it and paints on its timers."""

    @property
    @abstractmethod
    def text(self) -> str: ...


class ReplyBody(Protocol):
    """The markdown of one message inside its entry; a streaming reply's painter."""

    @property
    def painted(self) -> int:
        """How many characters of the host's text are on screen."""
        ...

    @property
    def markdown(self) -> Markdown:
        """The (last) Markdown widget: the one a streaming reply still appends to."""
        ...

    def compose(self) -> Iterator[Widget]:
        """The widgets the entry yields in its compose."""
        ...

    def finished_parts(self) -> list[Widget]:
        """Parts above the live one (a long streamed reply's), which the conversation may fold."""
        ...

    def part_sources(self) -> list[str]:
        """The markdown source of each part, top to bottom."""
        ...

    async def feed(self) -> None:
        """The host's text grew: paint it when due (returns at once; never waits for a paint)."""
        ...

    async def finish(self) -> None:
        """The reply ended (the host's text is whole): paint the rest."""
        ...
