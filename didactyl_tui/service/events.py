"""What the service tells its views: small frozen dataclasses, and the one listener list they travel on.

Light on purpose (stdlib only at run time): the TUI's first frame may import this module.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

if TYPE_CHECKING:
    from ..agent.documents.keys import DocumentKey
    from ..agent.documents.versions import DocumentSnapshot
    from ..agent.soul.prompt_record import PromptAssembly
    from ..agent.turn.events import ToolCallFinished
    from ..nostr.results import ConnectionState

log = logging.getLogger("didactyl.service")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DocumentChanged:
    """One of the agent's documents changed (a memory, the soul, the task list, the profile, contacts, relays)."""

    type: DocumentKey
    snapshot: DocumentSnapshot
    origin: Literal["local", "remote"]
    # This device's own edit lost to a newer version from another device (its text is in memory_history).
    lost_local: bool = False
    lost_event_id: str | None = None
    winner_event_id: str | None = None  # the concurrent version that is now the document


@dataclass(frozen=True, slots=True)
class OutboxChanged:
    """The memory outbox changed (a save queued, a relay accepted, a retry failed)."""

    pending: int  # memory publishes some relay still needs


@dataclass(frozen=True, slots=True)
class SignerStateChanged:
    """The agent's remote signer (NIP-46) stopped answering, or answers again (saves wait for it meanwhile)."""

    reachable: bool


@dataclass(frozen=True, slots=True)
class RelayStateChanged:
    url: str
    state: ConnectionState


@dataclass(frozen=True, slots=True)
class SelfContextChanged:
    who: Literal["agent", "admin"]


@dataclass(frozen=True, slots=True)
class PromptAssembled:
    """A prompt was assembled (a turn's or a dry run's): the one way an assembly reaches the inspector."""

    assembly: PromptAssembly


@dataclass(frozen=True, slots=True)
class DmSessionChanged:
    """A direct message arrived in (or was answered from) the DM session with ``counterpart`` (hex)."""

    session_id: str
    counterpart: str
    name: str


@dataclass(frozen=True, slots=True)
class SoulChanged:
    """A newer soul (kind 31120) from the relays is in use from the next prompt on (published elsewhere)."""

    event_id: str
    created_at: int
    sections: tuple[str, ...]
    relay: str  # the relay that delivered it

    @property
    def notice(self) -> str:
        """What the user is told (section names come from outside: the view cleans them, never markup)."""
        sections = ", ".join(self.sections)
        return f"A newer soul (event {self.event_id[:12]}…: {sections}) is used from the next message on."


@dataclass(frozen=True, slots=True)
class AttachedMessage:
    """A message of the conversation with an agent that runs elsewhere arrived outside a turn of this window (a late
    reply, or the admin writing from another device): saved in ``session_id`` at position ``at``; the view adds it
    unless the chat it shows was read from the store after that (then the message is on screen already).

    Each Attached* event says where it was saved: -1 when it could not be (the view shows it as it comes)."""

    session_id: str
    role: str  # "assistant" (the agent) or "user" (the admin)
    text: str
    at: int = -1


@dataclass(frozen=True, slots=True)
class AttachedToolCalls:
    """The tool calls behind an :class:`AttachedMessage` reply, told by the agent's prompt report after the reply (a
    turn shows them before it): saved in ``session_id`` after the reply, as they are shown."""

    session_id: str
    calls: tuple[ToolCallFinished, ...]
    at: int = -1


@dataclass(frozen=True, slots=True)
class AttachedDelivered:
    """A message of this window's that was not delivered (the turn said so) reached a relay of the agent's later, as
    written: saved in ``session_id`` now; the agent's reply comes as an :class:`AttachedMessage`."""

    session_id: str
    text: str
    detail: str  # the relays that took it
    at: int = -1


@dataclass(frozen=True, slots=True)
class ServiceWarning:
    message: str
    lasting: bool = False  # something the person must act on (copy a key's npub): shown until dismissed


@dataclass(frozen=True, slots=True)
class SignerApprovalAsked(ServiceWarning):
    """The remote signer asks the person to approve at ``url`` (an auth_url, cleaned) before it answers ``method``;
    the request waits ``wait_s`` more seconds at most. A warning (``message`` says all this); a view may also offer
    to wait longer (``AppService.wait_longer_for_signer``)."""

    url: str = ""
    method: str = ""
    wait_s: float = 0.0


@dataclass(frozen=True, slots=True)
class McpServersChanged:
    """An MCP server started, failed, hung or went away: ``lines`` says how each one is (the self pane shows them)."""

    lines: tuple[str, ...]
    failed: tuple[str, ...] = ()  # the servers that are down, with why


ServiceEvent = (DocumentChanged | RelayStateChanged | SelfContextChanged | PromptAssembled | ServiceWarning
                | OutboxChanged | DmSessionChanged | SoulChanged | SignerStateChanged | AttachedMessage
                | AttachedToolCalls | AttachedDelivered | McpServersChanged)


class Listeners(Generic[T]):
    """Callbacks for one kind of news; a listener's bug is logged, never raised into the sender."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[T], object]] = []

    def add(self, cb: Callable[[T], object]) -> Callable[[], None]:
        self._callbacks.append(cb)

        def remove() -> None:
            if cb in self._callbacks:
                self._callbacks.remove(cb)

        return remove

    def emit(self, value: T) -> None:
        for cb in list(self._callbacks):
            try:
                cb(value)
            except Exception:  # a listener's bug must not break the service
                log.exception("service listener failed")
