"""The main screen: conversation and input on the left; memory, self and prompt inspector in a sidebar.

Attributes down, messages up: service events arrive on the app's typed signal (:meth:`MainScreen.on_service_event`);
the widgets post requests (send, edit, load, dry run...) that this screen turns into workers calling the service.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget

from ...config import Config
from ...errors import AgentError
from ...service.events import (
    AttachedDelivered,
    AttachedMessage,
    DmSessionChanged,
    DocumentChanged,
    OutboxChanged,
    PromptAssembled,
    RelayStateChanged,
    SelfContextChanged,
    ServiceEvent,
    ServiceWarning,
    SignerApprovalAsked,
    SignerStateChanged,
    SoulChanged,
)
from ...service.labels import drift_lines
from ..actions import bindings
from ..streaming import ScreenHooks, choose_path, turn_running
from ..widgets.app_footer import AppFooter
from ..widgets.chat_input import ChatInput
from ..widgets.conversation import Conversation
from ..widgets.status_bar import StatusBar
from .chat_actions import ChatActions
from .main_model import ModelActions
from .main_sidebar import SHORT, SidebarActions

if TYPE_CHECKING:
    from textual.widgets import TabbedContent
    from textual.worker import Worker

    from ...service.screen_api import ScreenService
    from ...service.sessions import StoredTail
    from ..host import DidactylHost
    from ..widgets.error_entry import ErrorEntry
    from ..widgets.memory_pane import MemoryPane
    from ..widgets.message_entry import MessageEntry
    from ..widgets.prompt_inspector import PromptInspector
    from ..widgets.self_pane import SelfPane

POLL_S = 2.0  # relay states, dropped counts and pending publishes are cheap reads: poll them


class MainScreen(ScreenHooks, SidebarActions, ChatActions, ModelActions, Screen[None]):
    AUTO_FOCUS = "#chat-input"  # focused while composing: moving focus after the first frame costs a frame
    # Priority: the chat input (a TextArea) would otherwise take f6/f7 (select line/all) and friends.
    BINDINGS = bindings("main")

    streaming: reactive[bool] = reactive(False, bindings=True)

    def __init__(self, config: Config, *, opened: StoredTail | None = None) -> None:
        super().__init__()
        self.config = config
        self.session_id: str | None = None
        self._opened = opened  # `didactyl --continue`: a stored chat's last messages, shown in the first frame
        self._failed: dict[ErrorEntry, MessageEntry] = {}  # error entry -> the user message that failed
        self._queued: list[str] = []  # sent before the agent was ready: sent, in order, once it is
        self._start_failed: str | None = None
        self._narrow: bool | None = None  # the terminal is under [ui] sidebar_below_columns (None: not yet seen)

    # --- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            with Vertical(id="chat"):
                yield Conversation(id="conversation", reply_path=choose_path(self.config.ui.fast_streaming))
                yield ChatInput(id="chat-input", placeholder="Message the agent…  (Enter sends)")
            # The sidebar's place is kept; its panes mount right after the first frame (mount_sidebar).
            yield Vertical(id="sidebar-slot")
        yield StatusBar(id="status")
        yield AppFooter()

    async def mount_sidebar(self) -> None:
        """Mount the memory / self / inspector tabs (after the first frame: fewer widgets to style before it)."""
        if self.query("#sidebar"):
            return
        from .sidebar import build_sidebar

        sidebar = build_sidebar(self.config)
        await self.query_one("#sidebar-slot").mount(sidebar)
        self.screen_layout_refresh_signal.subscribe(sidebar, self._sidebar_laid_out)

    def _sidebar_laid_out(self, _screen: Screen[Any]) -> None:
        """Put the tab underline under the active tab once the tabs have their place. Textual's tabs place it
        "after the next refresh", which can come before the layout pass that places the tabs just mounted (seen
        under load): it stayed at zero width, and that pass sends them no Resize (the compositor had mapped them
        already), the event that would place it again. Sent here, after that pass."""
        from textual.widgets import Tabs

        tabs = self.sidebar.query_one(Tabs)
        if tabs.active_tab is None or not tabs.active_tab.region:
            return  # not laid out yet (a narrow terminal hides the sidebar): the next pass
        self.screen_layout_refresh_signal.unsubscribe(self.sidebar)
        tabs.post_message(events.Resize(tabs.size, tabs.virtual_size, tabs.container_size))

    async def on_mount(self) -> None:
        self.fit_sidebar(self.app.size.width)
        self.status.model = self.config.llm.model
        self.chat_input.focus()
        if self._opened is not None:  # before the first frame: the chat is in it (the rest is read after it)
            await self.show_tail(self._opened, first_frame=True)
        self.call_after_refresh(self.didactyl.first_painted)

    def on_resize(self, event: events.Resize) -> None:
        self.fit_sidebar(event.size.width)

    def on_screen_suspend(self) -> None:
        """A dialog or another screen opens on top: when it closes, the message box has the focus (not the
        inspector tree or a pane's button, a dozen Tabs away). Set now, not on the way back: keys typed right
        after the closing key go where the focus is at that moment."""
        if self.chat_input.focusable:
            self.set_focus(self.chat_input, scroll_visible=False)

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
        return cast("MemoryPane", self.query_one("#short-term" if memory_type == SHORT else "#long-term"))

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

    # --- the service ------------------------------------------------------------------------------

    @property
    def didactyl(self) -> DidactylHost:
        return cast("DidactylHost", self.app)

    def require_service(self) -> ScreenService:
        app = self.didactyl
        if app.service is None or not app.service_ready:
            raise AgentError("still starting: the relays and the key are being set up", "Not ready")
        return app.service

    def _service_or_notify(self) -> ScreenService | None:
        """For actions and callbacks (not workers): one that raises would take the whole app down."""
        try:
            return self.require_service()
        except AgentError as exc:
            self.notify(exc.message, title=exc.title, severity="warning")
            return None

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Worker.StateChanged does not bubble: hand this screen's worker errors to the app's one handler.
        self.didactyl.on_worker_state_changed(event)

    def service_attached(self, service: ScreenService) -> None:
        """The service object exists (not started yet): show what it knows without I/O."""
        self.didactyl.follow_service(self, self.on_service_event)
        self.show_model(service)
        self.status.activity = "connecting…"
        if self._model_wanted:  # typed into the box already: the model helper starts now
            self.model_needed()
        if not service.model.configured and service.attached_to is None:  # attached: the model runs elsewhere
            from .first_run import FirstRunScreen

            self.app.push_screen(FirstRunScreen(self.config, self.didactyl.env), self._first_run_closed)

    async def _first_run_closed(self, result: str | None) -> None:
        if result == "switch_model":
            await self.action_switch_model()

    def service_failed(self, line: str) -> None:
        self.status.activity = "not started: " + line
        self._start_failed = line
        if self._queued:  # never lost: back into the input, to send once the problem is fixed
            queued, self._queued = "\n\n".join(self._queued), []
            self.chat_input.restore(f"{queued}\n\n{self.chat_input.text}".strip() if self.chat_input.text
                                    else queued)

    def service_started(self) -> None:
        service = self.require_service()
        self.status.activity = ""
        self.show_model(service)
        shadowed = service.model.shadowed()
        if shadowed:  # a model chosen in the app, hidden by the environment: never silently
            self.notify(shadowed, title="Model", severity="warning", timeout=12)
        self.show_documents()
        self.refresh_self()
        self.refresh_relays()
        self.set_interval(POLL_S, self.refresh_relays)
        attached = service.attached_session
        if attached is not None and self.session_id is None:  # the conversation with the agent, as it stands
            self.session_id = attached
            self.resume(attached)
        elif self.session_id is not None:  # a chat opened while the service started (`--continue`)
            self.restore_shown_assemblies()
        self._send_queued()

    def _send_queued(self) -> None:
        if self._queued and not self.streaming and self.didactyl.service_ready:
            self.run_turn(self._queued.pop(0))

    def refresh_relays(self) -> None:
        service = self.didactyl.service
        if service is None or not self.didactyl.service_ready:
            return
        states = service.relays.states()
        for self_pane in self.self_panes():
            self_pane.show_relays(states, service.relays.dropped_counts(), self._relay_labels(states))
            self_pane.show_refused(service.relays.filtered_counts())
            if not self_pane.filled:
                self.refresh_self()
        self.status.show_relays(states, service.attached_relays)  # attached: the agent's relays, not ours
        self.count_pending()
        self.show_dm_status()

    def _relay_labels(self, states: dict[str, Any]) -> dict[str, str]:
        return {url: self.didactyl.relay_label(url) for url in states}

    def refresh_self(self) -> None:
        service = self.require_service()
        snapshot = service.identity.snapshot()
        drift = drift_lines(service.identity.drift())
        for pane in self.self_panes():
            pane.show_identity(snapshot.agent, snapshot.admin, admin_configured=service.admin_pubkey is not None,
                               agent_elsewhere=service.attached_to is not None)
            pane.show_drift(drift)

    def on_service_event(self, event: ServiceEvent) -> None:
        match event:
            case DocumentChanged(type=memory_type, snapshot=snapshot):
                self.show_document(memory_type, snapshot)  # a memory, the soul or the tasks
                self.refresh_relays()
                if event.lost_local:  # a concurrent edit: offer the merge view
                    from .merge import offer_merge

                    offer_merge(self, event, self.didactyl.service)
            case RelayStateChanged():
                self.refresh_relays()
            case SelfContextChanged():
                if self.didactyl.service_ready:
                    self.refresh_self()
            case PromptAssembled(assembly=assembly):  # every turn's and dry run's: the inspector's one source
                for inspector in self.inspectors():
                    inspector.add_assembly(assembly)
            case SignerApprovalAsked(message=message, wait_s=wait_s):  # the link is outside text: no markup
                self.notify(f"{message}. To give it more time: ctrl+p, \"Wait longer for the signer's approval\".",
                            title="Remote signer", severity="warning", timeout=max(wait_s, 10.0), markup=False)
            case ServiceWarning(message=message, lasting=lasting):  # outside words (a link, a relay's): no markup
                self.notify(message, title="Warning", severity="warning", timeout=3600 if lasting else None,
                            markup=False)
            case DmSessionChanged(name=name):  # the session "DM: <name>" is listed with the others (resume)
                self.notify(f"Direct message with {name}", title="DM", markup=False)
            case OutboxChanged(pending=pending):
                self.status.pending_publishes = pending
            case SignerStateChanged(reachable=reachable):
                self.status.signer_away = not reachable
            case AttachedMessage(session_id=sid) | AttachedDelivered(session_id=sid) if sid == self.session_id:
                self.show_attached(event)  # a late reply, the admin elsewhere, a message delivered late
            case SoulChanged():  # published elsewhere (the CLI, another device)
                self.notify(event.notice, title="Soul", markup=False)

    @work(group="attached", exit_on_error=False)
    async def show_attached(self, event: AttachedMessage | AttachedDelivered) -> None:
        from .attached_view import show_attached  # not before the first frame

        await show_attached(self.conversation, self._failed, event)

    # --- sending a message --------------------------------------------------------------------------

    @on(ChatInput.Submitted)
    def _submitted(self, message: ChatInput.Submitted) -> None:
        self.send(message.text)

    @on(ChatInput.Changed, "#chat-input")
    def _typed(self) -> None:
        self.model_needed()  # a message is on its way: the model's helper starts unless it runs

    def send(self, text: str) -> None:
        if self._start_failed is not None:
            self.notify(self._start_failed, title="Not started", severity="error")
            self.chat_input.restore(text)
            return
        if not self.didactyl.service_ready or self._queued:
            self._queue(text)
            return
        if self.streaming:
            self.notify("A reply is still being written (Esc cancels it).", title="Busy", severity="warning")
            self.chat_input.restore(text)
            return
        self.run_turn(text)

    def _queue(self, text: str) -> None:
        """Sent before the agent is ready (Enter while the app starts): kept, and sent the moment it is."""
        self._queued.append(text)
        waiting = len(self._queued)
        self.notify(f"{waiting} message{'s' if waiting > 1 else ''} will send when the agent is ready.",
                    title="Queued")
        self.status.activity = f"{waiting} queued · will send when the agent is ready"
        self._send_queued()

    @work(exclusive=True, group="turn", exit_on_error=False)
    async def run_turn(self, text: str) -> None:
        from .turn_view import TurnView

        try:
            service = self.require_service()
        except AgentError:
            self.chat_input.restore(text)
            raise
        self.model_needed()  # (a regenerated reply comes with no key typed)
        if self.session_id is None:
            self.session_id = await service.chat.new_session()
        turn = TurnView(self, text, await self.conversation.add_user(text))
        self.streaming = True
        turn.tell("thinking…")
        silence = self.set_interval(1.0, turn.tell_silence)  # a stream that stalls says so
        try:
            with turn_running(self.conversation.reply_path):  # the fast path holds full collections off
                async for event in service.chat.run_turn(self.session_id, text):
                    await turn.show(event)
        except asyncio.CancelledError:
            await turn.cancelled()
            raise
        finally:
            silence.stop()
            self.streaming = False
            self.status.activity = ""
            self.call_later(self._send_queued)

    def turn_failed(self, error: ErrorEntry, user_entry: MessageEntry) -> None:
        """A failed turn's error entry, remembered with the message that failed (for a retry)."""
        self._failed[error] = user_entry

    async def on_error_entry_retry_requested(self, message: ErrorEntry.RetryRequested) -> None:
        if self.streaming:  # the failed turn stays as it is, its Retry with it, until this reply ends
            self.notify("A reply is still being written (Esc cancels it).", title="Busy", severity="warning")
            return
        user_entry = self._failed.pop(message.entry, None)
        await message.entry.remove()
        if user_entry is not None:
            await user_entry.remove()
        if self.chat_input.text == message.text:
            self.chat_input.clear()
        self.send(message.text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel":
            return self.streaming
        return True

    def action_cancel(self) -> None:
        self.workers.cancel_group(self, "turn")

    async def stop_turn(self) -> None:
        """Cancel the reply being written and wait for its turn to end (its part so far kept in the chat, marked)."""
        turns = [w for w in self.workers if w.node is self and w.group == "turn" and not w.is_finished]
        self.action_cancel()
        await asyncio.gather(*(w.wait() for w in turns), return_exceptions=True)  # cancelled or failed: ended
