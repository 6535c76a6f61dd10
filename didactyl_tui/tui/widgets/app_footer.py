"""The main screen's footer: Textual's, without a leak that grew the app at every change of its keys.

Textual's ``Footer`` builds its keys anew whenever the screen's bindings change (here: every turn starts and ends,
the focus moves), and binds each new key to its own ``compact`` with ``data_bind``: a watcher on the footer that
Textual prunes only when ``compact`` itself changes, which it never does. Every key the footer ever showed stayed
alive behind those watchers (~17 widgets with their styles each time; found with gc on bench/growth_bench.py, #34).
After each rebuild the watchers of keys gone are pruned through the public API: ``mutate_reactive`` runs Textual's
own check of the watchers (it drops those of closed nodes and tells the live keys the value they have).
"""

from __future__ import annotations

from textual.widgets import Footer


class AppFooter(Footer):
    async def recompose(self) -> None:
        await super().recompose()
        self.mutate_reactive(Footer.compact)
