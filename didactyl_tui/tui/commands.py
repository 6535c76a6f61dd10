"""Every main-screen action in the command palette (ctrl+p), found by fuzzy search, each with its key."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .actions import PALETTE_ACTIONS, key_for


class DidactylCommands(Provider):
    """Actions of the main screen; hidden while another screen (editor, dialog) is on top."""

    def _actions(self) -> Iterator[tuple[str, str, Callable[[], object]]]:
        from .screens.main import MainScreen

        screen = self.screen
        if not isinstance(screen, MainScreen):
            return
        keymap = screen.config.keys  # [keys] remaps: the palette shows the keys that work now
        for action in PALETTE_ACTIONS:
            key = key_for(action, keymap)
            help_text = f"{action.doc[:1].upper()}{action.doc[1:]}" + (f"  ({key})" if key else "")
            yield action.title, help_text, partial(screen.run_action, action.action_name)

    async def discover(self) -> Hits:
        for title, help_text, run in self._actions():
            yield DiscoveryHit(title, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, run in self._actions():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), run, help=help_text)
