"""The TUI's side of the one action table (didactyl_tui/actions.py): each screen's bindings, the palette's
actions, the keys an action answers to now. Light: the first frame imports it."""

from __future__ import annotations

from collections.abc import Mapping

from textual.binding import Binding, BindingType

from ..actions import ACTIONS, Action


def _binding(action: Action, label: str) -> Binding:
    return Binding(action.keys, action.action_name, label, id=action.id, show=action.show, priority=action.priority)


def bindings(scope: str) -> list[BindingType]:  # the type of Textual's BINDINGS
    """The Textual bindings of one screen or widget, from the table."""
    return [_binding(a, a.label) for a in ACTIONS if a.scope == scope and a.keys]


def dialog_bindings(**labels: str) -> list[BindingType]:
    """A dialog's bindings: the dialog actions it names (``close="Cancel"``, ``confirm="Delete"``: the footer's
    word for each in this dialog; the dialog has ``action_close``/``action_confirm``), and the focus keys."""
    unknown = set(labels) - {a.id for a in ACTIONS if a.scope == "dialog"}
    if unknown:
        raise ValueError(f"not dialog actions: {sorted(unknown)}")
    return [_binding(a, labels.get(a.id, a.label)) for a in ACTIONS
            if a.scope == "dialog" and a.keys and (a.id in labels or not a.show)]


# The palette lists these (the main screen's, and the app's wherever the palette opens), each with its key.
PALETTE_ACTIONS: tuple[Action, ...] = tuple(a for a in ACTIONS if a.title and a.scope in ("main", "app"))


def key_for(action: Action, keymap: Mapping[str, str]) -> str:
    """The keys that run ``action`` now (a [keys] remap, else the default)."""
    return keymap.get(action.id, action.keys)

