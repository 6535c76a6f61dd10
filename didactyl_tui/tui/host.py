"""What the screens use of the app: :class:`~.app.DidactylApp` is a :class:`DidactylHost`. Screens reach the app
through this interface, never through the app's module (which imports them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from textual.dom import DOMNode
from textual.worker import Worker

from ..config import Config
from ..service.events import ServiceEvent

if TYPE_CHECKING:  # the service loads after the first frame
    from ..service.screen_api import ScreenService


class DidactylHost(Protocol):
    config: Config
    data_dir: Path
    env: dict[str, str]
    service_ready: bool  # started: its parts exist

    @property
    def service(self) -> ScreenService | None:
        """The service as the screens use it (built after the first frame)."""

    def follow_service(self, node: DOMNode, handler: Callable[[ServiceEvent], None]) -> None:
        """Hand ``node`` every service event until it is removed."""

    def relay_label(self, url: str) -> str:
        """How a relay is named on screen."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one handler of failed workers (a screen's worker errors are handed here)."""

    def first_painted(self) -> None:
        """The main screen's first frame is on the terminal: the service may start."""
