"""What the parts of :class:`~.main.MainScreen` use of the screen and of one another.

The main screen is one ``Screen`` written in four files: ``main.py`` (layout, the service, sending) and the parts it
inherits, ``main_sidebar.py`` (panes, memory, the inspector), ``chat_actions.py`` (chats: new, resume, rename...)
and ``main_model.py`` (the model and the theme). Each part reads and writes the screen's state. This class names
everything a part takes from ``main.py`` or from another part, with its type. It is the parts' base for the type
checker only (at run time they derive from ``object``; ``MainScreen`` alone derives from ``Screen``): the checker
reads each part as a ``Screen`` with this state, checks the screen's assignments against these types, and refuses
to instantiate a ``MainScreen`` that lacks one of the methods.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from textual.reactive import reactive
from textual.screen import Screen

if TYPE_CHECKING:
    from textual.widgets import TabbedContent

    from ...config import Config
    from ...service.screen_api import ScreenService
    from ...service.sessions import StoredTail
    from ..host import DidactylHost
    from ..widgets.chat_input import ChatInput
    from ..widgets.conversation import Conversation
    from ..widgets.memory_pane import MemoryPane
    from ..widgets.prompt_inspector import PromptInspector
    from ..widgets.self_pane import SelfPane
    from ..widgets.status_bar import StatusBar


class MainScreenState(Screen[None]):
    # main.py
    streaming = reactive(False, bindings=True)
    config: Config
    session_id: str | None
    _narrow: bool | None  # the terminal is under [ui] sidebar_below_columns (None: not yet seen)

    @property
    @abstractmethod
    def didactyl(self) -> DidactylHost: ...

    @property
    @abstractmethod
    def status(self) -> StatusBar: ...

    @property
    @abstractmethod
    def conversation(self) -> Conversation: ...

    @property
    @abstractmethod
    def chat_input(self) -> ChatInput: ...

    @property
    @abstractmethod
    def sidebar(self) -> TabbedContent: ...

    @property
    @abstractmethod
    def inspector(self) -> PromptInspector: ...

    @abstractmethod
    def inspectors(self) -> list[PromptInspector]: ...

    @abstractmethod
    def memory_pane(self, memory_type: str) -> MemoryPane: ...

    @abstractmethod
    def self_panes(self) -> list[SelfPane]: ...

    @abstractmethod
    def require_service(self) -> ScreenService: ...

    @abstractmethod
    def _service_or_notify(self) -> ScreenService | None: ...

    @abstractmethod
    def refresh_self(self) -> None: ...

    @abstractmethod
    def send(self, text: str) -> None: ...

    # main_model.py, used by main.py and the sidebar
    @abstractmethod
    def model_needed(self) -> None: ...

    @abstractmethod
    def show_model(self, service: ScreenService) -> None: ...

    # chat_actions.py, used by main.py
    @abstractmethod
    async def show_tail(self, tail: StoredTail, *, first_frame: bool = False) -> None: ...
