"""The main screen's footer: Textual's, without a leak that grew the app at every change of its keys.

Textual's ``Footer`` builds its keys anew whenever the screen's bindings change (here: every turn starts and ends,
the focus moves), and binds each new key to its own ``compact`` with ``data_bind``: a watcher on the footer that
Textual prunes only when ``compact`` itself changes, which it never does. Every key the footer ever showed stayed
alive behind those watchers (~17 widgets with their styles each time; found with gc on bench/growth_bench.py, #34).
The watchers of keys gone are pruned through the public API: ``mutate_reactive`` runs Textual's own check of the
watchers (it drops those of closed nodes, and tells the live keys the value they have: ~0.7 ms a key, so not at
each rebuild, which comes as a turn starts and ends, but once the footer has been left alone ``PRUNE_AFTER_S``).

Each new key is also made with the footer's ``compact`` already: a Textual key starts compact, so every key of every
rebuild was styled again twice (the class added as it mounted, removed when its binding gave it the footer's value):
36 restyles, 11.5 ms of the UI loop a reply, as its turn starts and ends (measured with the 1,000-token reply of
bench/stream_bench.py, #34).
"""

from __future__ import annotations

from collections.abc import Iterator

from textual.reactive import Reactive
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Footer

PRUNE_AFTER_S = 2.0


class AppFooter(Footer):
    _prune_timer: Timer | None = None

    def compose(self) -> Iterator[Widget]:
        for widget in super().compose():
            compact = getattr(type(widget), "compact", None)  # a key's reactive (its class is Textual's private one)
            if isinstance(compact, Reactive):  # before it mounts, its value and class: its first style is its last
                # The command palette's key is not bound to the footer's compact: it keeps a key's default (compact).
                value = True if widget.has_class("-command-palette") else self.compact
                widget.set_reactive(compact, value)
                widget.set_class(value, "-compact", update=False)  # what the key's watcher sets as it mounts
            yield widget

    async def recompose(self) -> None:
        await super().recompose()
        if self._prune_timer is not None:
            self._prune_timer.stop()
        self._prune_timer = self.set_timer(PRUNE_AFTER_S, self._prune)

    def _prune(self) -> None:
        self._prune_timer = None
        self.mutate_reactive(Footer.compact)
        self.displayed_children  # noqa: B018  (its cache of displayed children lets go of the keys before: see Conversation)
