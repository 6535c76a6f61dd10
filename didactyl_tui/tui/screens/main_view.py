"""What the main screen's parts see of it: its widgets and its door to the service (:class:`MainView`).

:class:`~.main.MainScreen` derives from it and builds the parts, which are handed the screen typed as this view: a
part reaches the widgets it draws on and the service, never another part's state through the screen (the parts it
uses are handed to it by name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget

from ...config import Config
from ...errors import AgentError
from ..widgets.chat_input import ChatInput
from ..widgets.conversation import Conversation
from ..widgets.status_bar import StatusBar

if TYPE_CHECKING:
    from textual.widgets import TabbedContent

    from ...service.screen_api import ScreenService
    from ..host import DidactylHost
    from ..widgets.memory_pane import MemoryPane
    from ..widgets.prompt_inspector import PromptInspector
    from ..widgets.self_pane import SelfPane


class MainView(Screen[None]):
    streaming: reactive[bool] = reactive(False, bindings=True)  # a reply is being written (Esc cancels it)

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config

    @property
    def conversation(self) -> Conversation:
        return self.query_one(Conversation)

    @property
    def chat_input(self) -> ChatInput:
        return self.query_one(ChatInput)

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    @property
    def inspector(self) -> PromptInspector:
        return cast("PromptInspector", self.query_one("#inspector-pane"))

    def inspectors(self) -> list[PromptInspector]:
        """The inspector, once mounted (it mounts lazily with its tab)."""
        return cast("list[PromptInspector]", list(self._in_sidebar("#inspector-pane")))

    def memory_pane(self, memory_type: str) -> MemoryPane:
        return cast("MemoryPane", self.query_one("#short-term" if memory_type == "short_term" else "#long-term"))

    @property
    def sidebar(self) -> TabbedContent:
        return cast("TabbedContent", self.query_one("#sidebar"))

    def self_panes(self) -> list[SelfPane]:
        """The self pane, once mounted (it mounts lazily with its tab)."""
        return cast("list[SelfPane]", list(self._in_sidebar("#self-pane")))

    def _in_sidebar(self, selector: str) -> list[Widget]:
        """The sidebar's widgets matching ``selector``: searched there, not over the whole screen, whose
        conversation holds thousands of widgets (a query over it on every relay poll showed in profiles)."""
        slot = self.query_one("#sidebar-slot")
        return list(slot.query(selector))

    # --- the service --------------------------------------------------------------------------------

    @property
    def didactyl(self) -> DidactylHost:
        return cast("DidactylHost", self.app)

    def require_service(self) -> ScreenService:
        app = self.didactyl
        if app.service is None or not app.service_ready:
            raise AgentError("still starting: the relays and the key are being set up", "Not ready")
        return app.service

    def service_or_notify(self) -> ScreenService | None:
        """For actions and callbacks (not workers): one that raises would take the whole app down."""
        try:
            return self.require_service()
        except AgentError as exc:
            self.notify(exc.message, title=exc.title, severity="warning")
            return None
