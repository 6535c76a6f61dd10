"""What every chat part does, wherever its agent runs: :class:`Conversation`.

Two parts implement it, independently: :class:`~.chat.ChatService` when the agent runs here (its prompt, model and
tools are here too: ``AppService.prompt``) and :class:`~.attached_chat.AttachedChat` when this window is attached to
an agent that runs elsewhere (a turn is a message to it; its prompt comes with its reply). Both keep their
conversations in this data dir's :class:`~.sessions.Sessions`, the collaborator they share. What differs between
them the views read here (``agent_here``, ``agent_session``, ``agent_relays``), never from the part's class."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from ..agent.audience import ADMIN_TURN, TurnAudience
from ..agent.conversations.session_kind import SessionKind
from ..agent.tools.registry import ToolPolicy
from ..agent.turn.events import AgentEvent
from .sessions import Sessions


class Conversation(Protocol):
    """A chat with the agent: its saved conversations, and a turn in one of them."""

    @property
    def sessions(self) -> Sessions:
        """The saved chats (list, show, rename, delete, export; each turn's prompt kept for the inspector)."""
        ...

    @property
    def agent_here(self) -> str | None:
        """The agent elsewhere this window is attached to (hex); None: this data dir's own agent answers here."""
        ...

    @property
    def agent_session(self) -> str | None:
        """Attached: the one conversation with the agent elsewhere; None: any of this data dir's own agent's."""
        ...

    @property
    def agent_relays(self) -> list[str] | None:
        """Attached: the relays the agent reads (where messages go, and replies are read); None: the agent runs
        here."""
        ...

    async def new_session(self) -> str:
        """A conversation for the next turn (attached: the one with the agent)."""
        ...

    async def session_messages(self, session_id: str) -> list[dict[str, Any]]:
        ...

    async def refusal_to_open(self, session_id: str) -> str | None:
        """Why the conversation ``session_id`` is not answered here (it is with another agent), and how to open it;
        None when it is this window's to continue."""
        ...

    def run_turn(self, session_id: str, message: str, kind: SessionKind = SessionKind.TERMINAL, *,
                 tools: ToolPolicy | None = None, audience: TurnAudience = ADMIN_TURN) -> AsyncIterator[AgentEvent]:
        """One turn: its events, ending with TurnFinished or TurnFailed (never raised)."""
        ...

    async def start(self) -> None:
        """Brought up once the documents and identities are loaded."""
        ...

    async def stop(self) -> None:
        ...

    async def settle(self) -> None:
        """Wait for saves still under way (a cancelled turn's): before the database closes."""
        ...


# What a view says when it asks for what only a local agent does while attached (AppService.prompt and the merge
# view's model are None then).
PROMPT_ELSEWHERE = ("the prompt is assembled where the agent runs; each reply's assembly shows in the inspector when "
                    "the agent sends it")
NO_MODEL_HERE = "no model runs here: this window is attached to an agent that runs elsewhere"
