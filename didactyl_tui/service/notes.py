"""``post_note`` wiring: who confirms a public note. The turn's session kind travels in a context variable
(each turn runs in its own task); only a terminal turn can ask the person at the terminal (through the
asker the TUI registers). A DM, ``serve`` or headless ``chat`` turn has nobody to ask: the tool is refused
there unless ``[tools] post_notes_without_asking`` allows posting outright."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from ..agent.conversations.session_kind import SessionKind
from ..agent.tools.registry import ToolError

current_session_kind: ContextVar[SessionKind | None] = ContextVar("didactyl_session_kind", default=None)

Ask = Callable[[str], Awaitable[bool]]
NO_ONE_TO_ASK = ("posting a public note needs the user's confirmation at the terminal, and nobody can confirm "
                 "here; tell the user what you would post instead")


class NoteConfirmation:
    """The ``confirm`` of the agent's NotePoster."""

    def __init__(self) -> None:
        self._ask: Ask | None = None

    def register_asker(self, ask: Ask) -> Callable[[], None]:
        """A view that can ask the person at the terminal (the TUI's dialog) registers here, as it listens for
        events; the returned function withdraws it."""
        self._ask = ask

        def withdraw() -> None:
            if self._ask is ask:
                self._ask = None

        return withdraw

    async def __call__(self, text: str) -> bool:
        ask = self._ask
        if current_session_kind.get() is not SessionKind.TERMINAL or ask is None:
            raise ToolError(NO_ONE_TO_ASK)
        return await ask(text)
