"""Every action in the command palette (ctrl+p), found by fuzzy search, each with its key: the main screen's
there, the app's (quit) wherever the palette opens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .actions import PALETTE_ACTIONS, key_for

if TYPE_CHECKING:
    from .host import DidactylHost


class DidactylCommands(Provider):
    """The table's palette actions; the main screen's are hidden while another screen (editor, dialog) is on
    top."""

    def _actions(self) -> Iterator[tuple[str, str, Callable[[], object]]]:
        from .screens.main import MainScreen

        screen = self.screen
        keymap = cast("DidactylHost", self.app).config.keys  # [keys] remaps: the palette shows the keys in force
        for action in PALETTE_ACTIONS:
            if action.scope == "main" and not isinstance(screen, MainScreen):
                continue
            key = key_for(action, keymap)
            help_text = f"{action.doc[:1].upper()}{action.doc[1:]}" + (f"  ({key})" if key else "")
            runner = screen if action.scope == "main" else self.app
            yield action.title, help_text, partial(runner.run_action, action.action_name)

    async def discover(self) -> Hits:
        for title, help_text, run in self._actions():
            yield DiscoveryHit(title, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, run in self._actions():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), run, help=help_text)
