"""What the screens use of the service: its parts, by name, and three facts about this window. The TUI's screens
are typed against :class:`ScreenService`, not the whole :class:`~.app.AppService` (which also starts, stops and
wires the parts: the app shell's business); ``tests/tui/test_screen_api.py`` checks that AppService is one and
that no screen reaches past it."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .conversation import Conversation
    from .dm import DmService
    from .documents import DocumentService
    from .identity import IdentityService
    from .merge import MergeService
    from .model import ModelService
    from .prompt import PromptService
    from .relays import RelayService


class ScreenService(Protocol):
    model: ModelService  # the model, its key and its checks (there before the service starts)
    admin_pubkey: str | None  # the admin's key (hex), if configured
    attached_to: str | None  # the agent this window is attached to (hex), or None

    @property
    def started(self) -> bool: ...

    @property
    def documents(self) -> DocumentService: ...

    @property
    def chat(self) -> Conversation: ...

    @property
    def prompt(self) -> PromptService | None: ...  # None when attached: the prompt is assembled where the agent runs

    @property
    def identity(self) -> IdentityService: ...

    @property
    def merges(self) -> MergeService: ...

    @property
    def relays(self) -> RelayService: ...

    @property
    def dm(self) -> DmService | None: ...

    @property
    def attached_session(self) -> str | None: ...

    @property
    def attached_relays(self) -> list[str] | None: ...

    def preload_llm(self) -> threading.Thread | None: ...

    def wait_longer_for_signer(self) -> int: ...

