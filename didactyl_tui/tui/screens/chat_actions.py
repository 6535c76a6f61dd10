"""The main screen's chat management: a new chat, resuming one (its prompt assemblies back in the inspector),
rename, delete, regenerate the last reply, edit and resend the last message, copy any message.

A part the main screen owns (:class:`SavedChats`), handed the screen and the open :class:`~.main_chat.Chat` (whose
session id it sets when it opens a stored chat). Every database call goes through the service on a worker (SQLite
never runs on the UI loop).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ...errors import AgentError
from ...service.labels import MINUTES, when
from .part_work import work_on_screen

if TYPE_CHECKING:
    from ...service.screen_api import ScreenService
    from ...service.sessions import Sessions, StoredTail
    from ...service.types import SessionInfo
    from .main_chat import Chat
    from .main_view import MainView

PREVIEW_CHARS = 70  # a message's line in the "copy a message" list


def _printable(text: str) -> str:
    """Stored text (a title, a message) shown in a list: one line, no control characters."""
    return "".join(ch for ch in " ".join(text.split()) if ch.isprintable())


def _with_whom(agent: str | None, service: ScreenService) -> str:
    """A chat's agent in the resume list, when it is not the one answering here."""
    from ...service.types import encode_npub

    if agent == service.chat.agent_here:
        return ""
    return f" · with {encode_npub(agent)[:16]}…, elsewhere" if agent else " · with this data dir's own agent"


def palette_line(text: str) -> str:
    """Stored text as a command-palette line: printable, and never read as markup (the palette parses it)."""
    from textual.markup import escape

    return escape(_printable(text))


class SavedChats:
    """The stored chats: the open one renamed, deleted, its last turn taken back, a message copied; another one
    resumed (its end at once, the rest behind it, its prompts back in the inspector)."""

    def __init__(self, screen: MainView, chat: Chat) -> None:
        self.screen, self.chat = screen, chat

    def _chat_or_notify(self, what: str) -> tuple[ScreenService, str] | None:
        service = self.screen.service_or_notify()
        if service is None:
            return None
        if self.chat.session_id is None:
            self.screen.notify(f"No chat to {what} yet: send a message or resume a chat first.", title="Chat")
            return None
        if self.screen.streaming:
            self.screen.notify("A reply is still being written (Esc cancels it).", title="Busy", severity="warning")
            return None
        return service, self.chat.session_id

    # --- rename and delete ------------------------------------------------------------------------------

    # The dialogs open from the action itself (awaited, on the app's key path): keys typed behind the palette
    # pick or the key wait for the dialog instead of landing in the message box. The chat's title and count are
    # one SQLite read on a worker thread first.

    async def _chat_info(self, what: str) -> tuple[str, SessionInfo] | None:
        """The chat's id and stored info, or None after saying why not (an action: nothing may raise here)."""
        chat = self._chat_or_notify(what)
        if chat is None:
            return None
        service, session_id = chat
        try:
            return session_id, await service.chat.sessions.info(session_id)
        except AgentError as exc:
            self.screen.notify(exc.message, title=exc.title, severity="error")
            return None

    async def rename(self) -> None:
        from .rename import RenameScreen

        chat = await self._chat_info("rename")
        if chat is None:
            return
        session_id, info = chat
        def renamed(title: str | None) -> None:
            if title is not None:
                self._rename(session_id, title)

        await self.screen.app.push_screen(RenameScreen(_printable(info.title)), renamed)

    @work_on_screen(exclusive=True, group="chat-manage")
    async def _rename(self, session_id: str, title: str) -> None:
        await self.screen.require_service().chat.sessions.rename(session_id, title)
        self.screen.notify(title, title="Chat renamed")

    async def delete(self) -> None:
        from .confirm import ConfirmScreen

        chat = await self._chat_info("delete")
        if chat is None:
            return
        session_id, info = chat
        count = f"{info.message_count} message{'s' if info.message_count != 1 else ''}"
        question = f"Delete “{_printable(info.title) or '(untitled)'}” and its {count}? This cannot be undone."
        def answered(yes: bool | None) -> None:
            if yes:
                self._delete(session_id)

        dialog = ConfirmScreen(question, title="Delete chat", confirm_label="Delete")
        await self.screen.app.push_screen(dialog, answered)

    @work_on_screen(exclusive=True, group="chat-manage")
    async def _delete(self, session_id: str) -> None:
        await self.screen.require_service().chat.sessions.delete(session_id)
        if self.chat.session_id == session_id:
            await self.chat.new_chat()
        self.screen.notify("The chat was deleted.", title="Deleted")

    # --- take back the last turn ----------------------------------------------------------------------

    def regenerate(self) -> None:
        if self._chat_or_notify("regenerate") is not None:
            self._take_back_last_turn(resend=True)

    def edit_last(self) -> None:
        if self._chat_or_notify("edit") is not None:
            self._take_back_last_turn(resend=False)

    @work_on_screen(exclusive=True, group="chat-manage")
    async def _take_back_last_turn(self, resend: bool) -> None:
        service, session_id = self.screen.require_service(), self.chat.session_id
        if session_id is None:  # the chat was closed meanwhile
            return
        if not resend and self.screen.chat_input.text.strip():
            # The words in the box are never overwritten: send or clear them first.
            raise AgentError("the message box is not empty: send or clear it first", "Edit")
        text = await service.chat.sessions.pop_last_turn(session_id)
        if text is None:
            self.screen.notify("This chat has no message yet.", title="Chat")
            return
        await self.screen.conversation.load_history(await service.chat.session_messages(session_id))
        if resend:
            self.chat.send(text)
        else:
            self.screen.chat_input.restore(text)
            self.screen.chat_input.focus()
            self.screen.notify("Edit the message and press Enter to send it again.", title="Edit and resend")

    # --- copy any message --------------------------------------------------------------------------------

    def copy_message(self) -> None:
        if self.screen.service_or_notify() is not None and self.chat.session_id is not None:
            self._offer_messages()
        elif self.chat.session_id is None:
            self.screen.notify("No message to copy yet.", title="Copy")

    @work_on_screen(exclusive=True, group="chat-manage")
    async def _offer_messages(self) -> None:
        from textual.command import SimpleCommand

        session_id = self.chat.session_id
        if session_id is None:  # the chat was closed meanwhile
            return
        messages = await self.screen.require_service().chat.session_messages(session_id)
        commands = []
        for n, message in enumerate(messages, start=1):
            text = message.get("content")
            if message.get("role") not in ("user", "assistant") or not isinstance(text, str) or not text:
                continue
            who = "You" if message["role"] == "user" else "Agent"
            preview = _printable(text)
            preview = preview if len(preview) <= PREVIEW_CHARS else preview[: PREVIEW_CHARS - 1] + "…"
            commands.append(SimpleCommand(palette_line(f"{n}. {who}: {preview}"), lambda t=text: self._copy(t),
                                          f"{len(text):,} characters"))
        if not commands:
            self.screen.notify("No message to copy yet.", title="Copy")
            return
        self.screen.app.search_commands(commands[::-1], placeholder="Copy a message…")

    def _copy(self, text: str) -> None:
        self.screen.app.copy_to_clipboard(text)
        self.screen.notify(f"Copied {len(text):,} characters.", title="Copy")

    # --- a resumed chat's inspector --------------------------------------------------------------------

    async def restore_assemblies(self, service: ScreenService, session_id: str) -> None:
        saved = await service.chat.sessions.assemblies(session_id)
        for inspector in self.screen.inspectors():
            inspector.load_saved(saved)

    # --- chats ----------------------------------------------------------------------------------------

    def offer_resume(self) -> None:
        if self.screen.service_or_notify() is not None:
            self._offer_sessions()

    @work_on_screen(exclusive=True, group="sessions")
    async def _offer_sessions(self) -> None:
        service = self.screen.require_service()
        sessions = await service.chat.sessions.list()  # SQLite: on a worker thread; chats with no message left out
        if not sessions:
            self.screen.notify("No saved chats yet.", title="Resume")
            return
        from textual.command import SimpleCommand

        commands = [
            SimpleCommand(
                palette_line(s.title) or "(untitled)",
                lambda sid=s.id: self.resume(sid),
                f"{when(s.updated_at, MINUTES)} · {s.message_count} messages{_with_whom(s.agent, service)}",
            )
            for s in sessions
        ]
        self.screen.app.search_commands(commands, placeholder="Resume a chat…")

    @work_on_screen(exclusive=True, group="turn")
    async def resume(self, session_id: str) -> None:
        """Open a stored chat: its end on screen at once, the rest read behind it (:meth:`read_earlier`). It needs
        no service: before the service has started the chat is shown read-only (a message sent meanwhile waits for
        the service, as at any start), and its prompts come back to the inspector once the service is there
        (:meth:`restore_shown_assemblies`). Another agent's conversation is never answered here: it stays closed.
        A chat chosen while a reply is written ends that turn (the turn group: one at a time)."""
        await self._open(session_id)

    @work_on_screen(group="agents-chat")
    async def open_agents_chat(self, session_id: str) -> None:
        """The conversation with the agent elsewhere, opened as the service starts: not in the turn group, so a
        message sent meanwhile (typed before the agent was ready, sent the moment it is) does not end the opening;
        that message joins the conversation once it is on screen (:meth:`Chat.run_turn` waits for it)."""
        await self._open(session_id)

    async def _open(self, session_id: str) -> None:
        async with self.chat.opening:  # a message of this chat saved meanwhile is shown after it (Chat.show_attached)
            async with self._stored_chats() as sessions:
                refusal = await sessions.refusal_to_open(session_id, self._agent_here())
                tail = await sessions.tail(session_id) if refusal is None else None
            if tail is None:
                self.screen.notify(refusal or "", title="Another agent's conversation", severity="warning",
                                   timeout=15, markup=False)
                return
            await self.show_tail(tail)
        service = self.screen.didactyl.service
        if service is not None and self.screen.didactyl.service_ready:
            await self.restore_assemblies(service, session_id)

    def _agent_here(self) -> str | None:
        """The agent that answers in this window: one elsewhere (hex) when attached, None for this data dir's own."""
        service = self.screen.didactyl.service
        if service is not None and self.screen.didactyl.service_ready:
            return service.chat.agent_here
        from ...service.attach import attach_agent_of

        return attach_agent_of(self.screen.didactyl.config)  # checked when the app was launched

    async def show_tail(self, tail: StoredTail, *, first_frame: bool = False) -> None:
        """A stored chat's last messages on screen (``didactyl --continue``: in the first frame, one screen of
        them); the rest after."""
        from ..widgets.conversation import FIRST_FRAME_SCREENS, TAIL_SCREENS

        self.chat.session_id, self.chat.shown_until = tail.session_id, tail.until
        self.chat.reset_figures()
        await self.screen.conversation.load_history(tail.messages, earlier=tail.earlier, chat=tail.session_id,
                                                    screens=FIRST_FRAME_SCREENS if first_frame else TAIL_SCREENS)
        if tail.earlier:
            self.read_earlier(tail)

    @work_on_screen(exclusive=True, group="earlier")
    async def read_earlier(self, tail: StoredTail) -> None:
        """The messages before a shown tail (SQLite and their entries on worker threads; a turn started meanwhile
        does not stop it)."""
        async with self._stored_chats() as sessions:
            messages = await sessions.earlier(tail)
        await self.screen.conversation.load_earlier(messages, chat=tail.session_id)

    @contextlib.asynccontextmanager
    async def _stored_chats(self) -> AsyncIterator[Sessions]:
        """The service's saved chats once it has started; before, the data dir's, opened for this read alone."""
        service = self.screen.didactyl.service
        if service is not None and self.screen.didactyl.service_ready:
            yield service.chat.sessions
            return
        from ...service.sessions import open_sessions

        sessions = await asyncio.to_thread(open_sessions, self.screen.didactyl.data_dir)
        try:
            yield sessions
        finally:
            await asyncio.to_thread(sessions.store.close)

    def service_started(self, service: ScreenService) -> None:
        attached = service.attached_session
        if attached is not None and self.chat.session_id in (None, attached):
            # The conversation with the agent as it stands now: starting read the relays and sent what waited, and
            # told nobody (one shown by `--continue` was read before).
            self.chat.session_id = attached
            self.open_agents_chat(attached)
        elif self.chat.session_id is not None:  # a chat opened while the service started (`--continue`)
            self.restore_shown_assemblies()

    @work_on_screen(group="assemblies")
    async def restore_shown_assemblies(self) -> None:
        """The service has started: the prompts of a chat opened before it come back to the inspector."""
        if self.chat.session_id is not None:
            await self.restore_assemblies(self.screen.require_service(), self.chat.session_id)
