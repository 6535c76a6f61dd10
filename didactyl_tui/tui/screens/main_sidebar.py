"""The main screen's sidebar: its panes shown, hidden and fitted to the terminal; what the self pane and the status
bar show of the relays, the signer, the outbox and the DMs (read off the UI loop); the identity's drift resolved;
the prompt inspector's dry run, detail and diff.

A part the main screen owns (:class:`SidebarPanes`): it owns whether the terminal is narrow, and is handed the
screen, the model controls (a dry run warms the model) and the open chat (whose session a dry run uses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...service.labels import drift_lines
from .part_work import work_on_screen

if TYPE_CHECKING:
    from ..widgets.prompt_inspector import PromptInspector
    from .main_chat import Chat
    from .main_model import ModelControls
    from .main_view import MainView


class SidebarPanes:
    def __init__(self, screen: MainView, model: ModelControls, chat: Chat) -> None:
        self.screen, self.model, self.chat = screen, model, chat
        self.narrow: bool | None = None  # the terminal is under [ui] sidebar_below_columns (None: not yet seen)

    # --- the self pane and the status bar -------------------------------------------------------------------

    def refresh_relays(self) -> None:
        didactyl = self.screen.didactyl
        service = didactyl.service
        if service is None or not didactyl.service_ready:
            return
        states = service.relays.states()
        labels = {url: didactyl.relay_label(url) for url in states}
        for self_pane in self.screen.self_panes():
            self_pane.show_relays(states, service.relays.dropped_counts(), labels)
            self_pane.show_refused(service.relays.filtered_counts())
            if not self_pane.filled:
                self.refresh_self()
        self.screen.status.show_relays(states, service.attached_relays)  # attached: the agent's relays, not ours
        self.count_pending()
        self.show_dm_status()

    def refresh_self(self) -> None:
        service = self.screen.require_service()
        snapshot = service.identity.snapshot()
        drift = drift_lines(service.identity.drift())
        for pane in self.screen.self_panes():
            pane.show_identity(snapshot.agent, snapshot.admin, admin_configured=service.admin_pubkey is not None,
                               agent_elsewhere=service.attached_to is not None)
            pane.show_drift(drift)

    # --- read off the UI loop ---------------------------------------------------

    @work_on_screen(exclusive=True, group="dm-status")
    async def show_dm_status(self) -> None:
        """The DM ledger is SQLite: read on a worker thread by the service, never on the UI loop."""
        dm = self.screen.require_service().dm
        status = await dm.status() if dm is not None else None
        for self_pane in self.screen.self_panes():
            self_pane.show_dm_status(status.summary() if status is not None else None,
                                     status.given_up if status is not None else [])

    @work_on_screen(exclusive=True, group="pending")
    async def count_pending(self) -> None:
        """The outbox is SQLite: counted on a worker thread, never on the UI loop."""
        self.screen.status.pending_publishes = len(await self.screen.require_service().documents.pending_publishes())

    # --- panes ----------------------------------------------------------------------------------------------

    def toggle(self, pane_id: str) -> None:
        slot = self.screen.query_one("#sidebar-slot")
        if not self.screen.query("#sidebar"):
            return  # not mounted yet (the first instants)
        if slot.display and self.screen.sidebar.active == pane_id:
            self.screen.set_focus(self.screen.chat_input)
            slot.display = False
        else:
            self.show_pane(pane_id)

    def show_pane(self, pane_id: str) -> None:
        self.screen.query_one("#sidebar-slot").display = True
        if not self.screen.query("#sidebar"):
            return
        focused = self.screen.focused
        if focused is not None and self.screen.sidebar in focused.ancestors and self.screen.sidebar.active != pane_id:
            # Focus inside the pane being hidden would move to its next widget, and the tabs bring back the
            # pane that holds the focus (F2/F3 from the inspector tree did nothing): focus the input first.
            self.screen.set_focus(self.screen.chat_input)
        self.screen.sidebar.active = pane_id

    def fit(self, width: int) -> None:
        """Hide the sidebar when the terminal becomes narrow, show it again when it becomes wide; in between,
        the user's F2/F3/F4/ctrl+b choices stand."""
        narrow = width < self.screen.config.ui.sidebar_below_columns
        if narrow == self.narrow:
            return
        self.narrow = narrow
        slot = self.screen.query_one("#sidebar-slot")
        if narrow and self.screen.focused is not None and slot in self.screen.focused.ancestors:
            self.screen.set_focus(self.screen.chat_input)
        slot.display = not narrow

    def toggle_sidebar(self) -> None:
        slot = self.screen.query_one("#sidebar-slot")
        if slot.display and self.screen.focused is not None and slot in self.screen.focused.ancestors:
            self.screen.set_focus(self.screen.chat_input)
        slot.display = not slot.display

    # --- identity drift ----------------------------------------------------------------------------------------

    @work_on_screen(exclusive=True, group="identity")
    async def resolve_identity_drift(self, adopt: bool) -> None:
        service = self.screen.require_service()
        if adopt:
            kinds = await service.identity.adopt()
            self.screen.notify(f"Kept the relays' version ({len(kinds)} kind{'s' if len(kinds) != 1 else ''}).",
                               title="Identity")
        else:
            outcomes = await service.identity.republish_merged()
            summary = "; ".join(o.summary() for o in outcomes.values()) or "nothing to publish"
            self.screen.notify(f"Republished with config.toml's fields merged: {summary}", title="Identity")
        self.refresh_self()

    # --- prompt inspector ----------------------------------------------------------------------------------------

    @work_on_screen(exclusive=True, group="dry_run")
    async def run_dry_run(self) -> None:
        service = self.screen.require_service()
        prompt = service.prompt
        if prompt is None:  # attached: the agent's prompt comes with each of its replies
            from ...service.conversation import PROMPT_ELSEWHERE

            self.screen.notify(PROMPT_ELSEWHERE, title="Attached", severity="warning", timeout=8, markup=False)
            return
        self.model.needed()  # its tokenizer counts the prompt: the status bar says while the helper loads
        session_id = await self.chat.session(service)
        text = self.screen.chat_input.text.strip() or None
        assembly = await prompt.dry_run(session_id, text)  # the inspector gets it as PromptAssembled
        self.show_pane("inspector")
        from ..widgets.assembly_tree import prompt_tokens

        self.screen.status.prompt_tokens, self.screen.status.tokens_estimated = prompt_tokens(assembly, None)
        self.screen.status.context_window = service.model.context_window()

    def open_detail(self, message: PromptInspector.OpenRequested) -> None:
        from .inspector_detail import InspectorDetailScreen

        previous = self.screen.inspector.previous_of(message.entry)
        self.screen.app.push_screen(InspectorDetailScreen(message.entry, previous), self._detail_closed)

    def _detail_closed(self, result: str | None) -> None:
        if result == "dry_run":
            self.run_dry_run()

    async def show_diff(self, message: PromptInspector.DiffRequested) -> None:
        from .inspector_detail import show_assembly_diff

        await show_assembly_diff(self.screen, message.previous, message.entry)
