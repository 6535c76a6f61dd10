"""The main screen: conversation and input on the left; memory, self and prompt inspector in a sidebar.

Attributes down, messages up: service events arrive on the app's typed signal (:meth:`MainScreen.on_service_event`);
the widgets post requests (send, edit, load, dry run...) that this screen hands to its parts.

The screen is what Textual sees: the layout, the widgets, the bindings' actions and the messages' handlers, each a
one-line delegation to a part it owns. Each part owns its state and is handed its collaborators (the screen, whose
widgets it draws on and whose node runs its workers, and the other parts it uses):

* :class:`~.main_model.ModelControls` — the model's helper warmed ahead of need, the model dialog, the theme;
* :class:`~.main_chat.Chat` — the chat open here: its session id, sending and the queue, the turn, retry, cancel;
* :class:`~.chat_actions.SavedChats` — stored chats: rename, delete, take back a turn, copy, resume;
* :class:`~.main_documents.DocumentPanes` — the memory and tasks panes, each document's editor and history;
* :class:`~.main_sidebar.SidebarPanes` — the panes shown or hidden, the relays and the self pane, the inspector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen

from ...config import Config
from ...service.events import (
    AttachedDelivered,
    AttachedMessage,
    AttachedToolCalls,
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
from ..actions import bindings
from ..streaming import ScreenHooks, choose_path
from ..widgets.app_footer import AppFooter
from ..widgets.chat_input import ChatInput
from ..widgets.conversation import Conversation
from ..widgets.status_bar import StatusBar
from .chat_actions import SavedChats
from .main_chat import Chat
from .main_documents import LONG, SHORT, SOUL, TASKS, DocumentPanes
from .main_model import ModelControls
from .main_sidebar import SidebarPanes
from .main_view import MainView

if TYPE_CHECKING:
    from textual.widgets import Tabs
    from textual.worker import Worker

    from ...service.screen_api import ScreenService
    from ...service.sessions import StoredTail
    from ..widgets.error_entry import ErrorEntry
    from ..widgets.memory_pane import MemoryPane
    from ..widgets.prompt_inspector import PromptInspector

POLL_S = 2.0  # relay states, dropped counts and pending publishes are cheap reads: poll them


class MainScreen(ScreenHooks, MainView):
    AUTO_FOCUS = "#chat-input"  # focused while composing: moving focus after the first frame costs a frame
    # Priority: the chat input (a TextArea) would otherwise take f6/f7 (select line/all) and friends.
    BINDINGS = bindings("main")

    def __init__(self, config: Config, *, opened: StoredTail | None = None) -> None:
        super().__init__(config)
        self._opened = opened  # `didactyl --continue`: a stored chat's last messages, shown in the first frame
        self.model = ModelControls(self)
        self.chat = Chat(self, self.model)
        self.saved_chats = SavedChats(self, self.chat)
        self.documents = DocumentPanes(self)
        self.panes = SidebarPanes(self, self.model, self.chat)
        self._underline_for: tuple[str, tuple[int, int]] | None = None  # the active tab and its columns, last pass
        self._sidebar_tabs: Tabs | None = None

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

        slot = self.query_one("#sidebar-slot")
        # Listened for before the mount: the tabs are laid out over several passes, and some run while the mount is
        # awaited (1-2, measured).
        self.screen_layout_refresh_signal.subscribe(slot, self._sidebar_laid_out)
        await slot.mount(build_sidebar(self.config))

    def _sidebar_laid_out(self, _screen: Screen[Any]) -> None:
        """Put the tab underline under the active tab again when a layout pass moved or resized that tab. Textual's
        tabs place it "after the next refresh" when a tab is activated or the tabs are resized, animated from there;
        a pass that changes a tab's place or width without resizing the tabs themselves (the tabs just mounted, laid
        out over several passes: their first places are a column wide) left it where it was, or an animation begun
        for the first place ended there after it (seen under load, an underline one column wide, with the first
        run's dialog on top: no later event placed it again). Placed here at once, after the pass."""
        from textual.widgets import Tabs

        tabs = self._sidebar_tabs
        if tabs is None:  # found once (a query of the whole screen each pass would cost what a long reply holds)
            found = self.query("#sidebar Tabs")
            tabs = self._sidebar_tabs = found.first(Tabs) if found else None
        if tabs is None or tabs.active_tab is None or not tabs.active_tab.region:
            return  # not mounted or not laid out yet (a narrow terminal hides the sidebar): the next pass
        tab = tabs.active_tab
        now = (tabs.active, tab.virtual_region.shrink(tab.styles.gutter).column_span)
        seen, self._underline_for = self._underline_for, now
        # Another tab activated: Textual's tabs move the underline themselves, animated.
        if seen is None or (seen[0] == now[0] and seen[1] != now[1]):
            underline: Any = tabs.query_one("Underline")  # Textual's tabs' bar (not exported by textual.widgets)
            # An animation begun for an earlier place (the tabs' first, a column wide) would end there, after this.
            for attribute in ("highlight_start", "highlight_end"):
                self.app.animator.force_stop_animation(underline, attribute)
            underline.highlight_start, underline.highlight_end = now[1]

    async def on_mount(self) -> None:
        self.panes.fit(self.app.size.width)
        self.status.model = self.config.llm.model
        self.chat_input.focus()
        if self._opened is not None:  # before the first frame: the chat is in it (the rest is read after it)
            await self.saved_chats.show_tail(self._opened, first_frame=True)
        self.call_after_refresh(self.didactyl.first_painted)

    def on_resize(self, event: events.Resize) -> None:
        self.panes.fit(event.size.width)

    def on_screen_suspend(self) -> None:
        """A dialog or another screen opens on top: when it closes, the message box has the focus (not the
        inspector tree or a pane's button, a dozen Tabs away). Set now, not on the way back: keys typed right
        after the closing key go where the focus is at that moment."""
        if self.chat_input.focusable:
            self.set_focus(self.chat_input, scroll_visible=False)

    # --- the service --------------------------------------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Worker.StateChanged does not bubble: hand this screen's worker errors (its parts' too) to the app's handler.
        self.didactyl.on_worker_state_changed(event)

    def service_attached(self, service: ScreenService) -> None:
        """The service object exists (not started yet): show what it knows without I/O."""
        self.didactyl.follow_service(self, self.on_service_event)
        self.model.show(service)
        self.status.activity = "connecting…"
        if self.model.wanted:  # typed into the box already: the model helper starts now
            self.model.needed()
        if not service.model.configured and service.attached_to is None:  # attached: the model runs elsewhere
            from .first_run import FirstRunScreen

            self.app.push_screen(FirstRunScreen(self.config, self.didactyl.env), self._first_run_closed)

    async def _first_run_closed(self, result: str | None) -> None:
        if result == "switch_model":
            await self.action_switch_model()

    def service_failed(self, line: str) -> None:
        self.status.activity = "not started: " + line
        self.chat.service_failed(line)

    def service_started(self) -> None:
        service = self.require_service()
        self.status.activity = ""
        self.model.show(service)
        shadowed = service.model.shadowed()
        if shadowed:  # a model chosen in the app, hidden by the environment: never silently
            self.notify(shadowed, title="Model", severity="warning", timeout=12)
        self.documents.show_documents()
        self.panes.refresh_self()
        self.panes.refresh_relays()
        self.set_interval(POLL_S, self.panes.refresh_relays)
        self.saved_chats.service_started(service)
        self.chat.send_queued()

    def on_service_event(self, event: ServiceEvent) -> None:
        match event:
            case DocumentChanged(type=memory_type, snapshot=snapshot):
                self.documents.show_document(memory_type, snapshot)  # a memory, the soul or the tasks
                self.panes.refresh_relays()
                if event.lost_local:  # a concurrent edit: offer the merge view
                    from .merge import offer_merge

                    offer_merge(self, event, self.didactyl.service)
            case RelayStateChanged():
                self.panes.refresh_relays()
            case SelfContextChanged():
                if self.didactyl.service_ready:
                    self.panes.refresh_self()
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
            case AttachedMessage() | AttachedToolCalls() | AttachedDelivered():
                # a late reply (and its tool calls, told after it), the admin elsewhere, a message delivered late:
                # shown if its chat is (judged once that chat is on screen: it may be being read now)
                self.chat.show_attached(event)
            case SoulChanged():  # published elsewhere (the CLI, another device)
                self.notify(event.notice, title="Soul", markup=False)

    async def stop_turn(self) -> None:
        """Cancel the reply being written and wait for its turn to end (the app, quitting)."""
        await self.chat.stop_turn()

    # --- the widgets' messages --------------------------------------------------------------------------------

    @on(ChatInput.Submitted)
    def _submitted(self, message: ChatInput.Submitted) -> None:
        self.chat.send(message.text)

    @on(ChatInput.Changed, "#chat-input")
    def _typed(self) -> None:
        self.model.needed()  # a message is on its way: the model's helper starts unless it runs

    async def on_error_entry_retry_requested(self, message: ErrorEntry.RetryRequested) -> None:
        await self.chat.retry(message.entry, message.text)

    def on_memory_pane_edit_requested(self, message: MemoryPane.EditRequested) -> None:
        self.documents.open_editor(message.memory_type)

    def on_memory_pane_load_requested(self, message: MemoryPane.LoadRequested) -> None:
        self.documents.load_long_term()

    def on_memory_pane_history_requested(self, message: MemoryPane.HistoryRequested) -> None:
        self.documents.open_history(message.memory_type)

    def on_self_pane_adopt_requested(self) -> None:
        self.panes.resolve_identity_drift(adopt=True)

    def on_self_pane_republish_requested(self) -> None:
        self.panes.resolve_identity_drift(adopt=False)

    def on_prompt_inspector_dry_run_requested(self) -> None:
        self.panes.run_dry_run()

    def on_prompt_inspector_open_requested(self, message: PromptInspector.OpenRequested) -> None:
        self.panes.open_detail(message)

    async def on_prompt_inspector_diff_requested(self, message: PromptInspector.DiffRequested) -> None:
        await self.panes.show_diff(message)

    # --- the bindings' and the palette's actions (didactyl_tui/actions.py): each a part's -----------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel":
            return self.streaming
        return True

    def action_cancel(self) -> None: self.chat.cancel()
    async def action_new_chat(self) -> None: await self.chat.new_chat()
    def action_copy_reply(self) -> None: self.chat.copy_reply()
    def action_export_markdown(self) -> None: self.chat.export()
    async def action_rename_chat(self) -> None: await self.saved_chats.rename()
    async def action_delete_chat(self) -> None: await self.saved_chats.delete()
    def action_regenerate(self) -> None: self.saved_chats.regenerate()
    def action_edit_last(self) -> None: self.saved_chats.edit_last()
    def action_copy_message(self) -> None: self.saved_chats.copy_message()
    def action_resume_chat(self) -> None: self.saved_chats.offer_resume()
    async def action_switch_model(self) -> None: await self.model.switch()
    def action_change_theme(self) -> None: self.model.change_theme()
    def action_signer_wait_longer(self) -> None: self.model.signer_wait_longer()
    def action_toggle_memory(self) -> None: self.panes.toggle("memory")
    def action_toggle_self(self) -> None: self.panes.toggle("self")
    def action_toggle_inspector(self) -> None: self.panes.toggle("inspector")
    def action_toggle_sidebar(self) -> None: self.panes.toggle_sidebar()
    def action_dry_run(self) -> None: self.panes.run_dry_run()
    def action_edit_short_term(self) -> None: self.documents.open_editor(SHORT)
    def action_edit_long_term(self) -> None: self.documents.open_editor(LONG)
    def action_edit_soul(self) -> None: self.documents.open_editor(SOUL)
    def action_edit_tasks(self) -> None: self.documents.open_editor(TASKS)
    def action_history_short_term(self) -> None: self.documents.open_history(SHORT)
    def action_history_long_term(self) -> None: self.documents.open_history(LONG)
    def action_history_soul(self) -> None: self.documents.open_history(SOUL)
    def action_history_tasks(self) -> None: self.documents.open_history(TASKS)
    def action_load_long_term(self) -> None: self.documents.offer_load_long_term()
