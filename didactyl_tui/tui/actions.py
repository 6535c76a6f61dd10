"""The TUI's side of the one action table (didactyl_tui/actions.py): each screen's bindings, the palette's
actions, the keys an action answers to now. Light: the first frame imports it."""

from __future__ import annotations

from collections.abc import Mapping

from textual.binding import Binding

from ..actions import ACTIONS, KEY_ACTIONS, Action, check_keymap

__all__ = ["ACTIONS", "KEY_ACTIONS", "PALETTE_ACTIONS", "Action", "bindings", "check_keymap", "key_for"]


def bindings(scope: str) -> list[Binding]:
    """The Textual bindings of one screen or widget, from the table."""
    return [Binding(a.keys, a.action_name, a.label, id=a.id, show=a.show, priority=a.priority)
            for a in ACTIONS if a.scope == scope and a.keys]


PALETTE_ACTIONS: tuple[Action, ...] = tuple(a for a in ACTIONS if a.title and a.scope == "main")


def key_for(action: Action, keymap: Mapping[str, str]) -> str:
    """The keys that run ``action`` now (a [keys] remap, else the default)."""
    return keymap.get(action.id, action.keys)
