"""The chat open on the main screen: its session id, sending (a message typed before the agent is ready is queued
and sent once it is), the turn (an exclusive worker: the UI loop never waits), a failed turn's retry, cancelling,
a new chat, and the chat copied or exported.

A part the main screen owns (:class:`Chat`): it owns this state and is handed the screen it draws on and the model
controls it warms.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import AgentError
from ..streaming import turn_running
from .part_work import work_on_screen

if TYPE_CHECKING:
    from ...service.events import AttachedDelivered, AttachedMessage, AttachedToolCalls
    from ...service.screen_api import ScreenService
    from ..widgets.error_entry import ErrorEntry
    from ..widgets.message_entry import MessageEntry
    from .main_model import ModelControls
    from .main_view import MainView

BUSY = "A reply is still being written (Esc cancels it)."


class Chat:
    def __init__(self, screen: MainView, model: ModelControls) -> None:
        self.screen, self.model = screen, model
        self.session_id: str | None = None  # the chat shown (None: a new chat, made by its first message)
        # Where the chat on screen was read up to in the store: a message saved before that is on screen already.
        self.shown_until = 0
        # Held while a stored chat is read and put on screen: a message that comes meanwhile is shown after it.
        self.opening = asyncio.Lock()
        self.queued: list[str] = []  # sent before the agent was ready: sent, in order, once it is
        self.failed: dict[ErrorEntry, MessageEntry] = {}  # error entry -> the user message that failed
        self._start_failed: str | None = None

    async def session(self, service: ScreenService) -> str:
        """The chat's session id, made now for a new chat."""
        if self.session_id is None:
            self.session_id = await service.chat.new_session()
        return self.session_id

    # --- the service ------------------------------------------------------------------------------------------

    def service_failed(self, line: str) -> None:
        self._start_failed = line
        if self.queued:  # never lost: back into the input, to send once the problem is fixed
            chat_input = self.screen.chat_input
            queued, self.queued = "\n\n".join(self.queued), []
            chat_input.restore(f"{queued}\n\n{chat_input.text}".strip() if chat_input.text else queued)

    @work_on_screen(group="attached")
    async def show_attached(self, event: AttachedMessage | AttachedToolCalls | AttachedDelivered) -> None:
        """A message of a chat with an agent elsewhere, saved outside a turn: added once, in the order they came,
        when its chat is on screen and was read before it was saved."""
        from .attached_view import show_attached  # not before the first frame

        async with self.opening:  # each waits for a chat being read, then for the one before it
            if event.session_id != self.session_id or 0 <= event.at < self.shown_until:
                return  # another chat on screen, or this one was read after the message was saved: shown already
            await show_attached(self.screen.conversation, self.failed, event)
            self.shown_until = max(self.shown_until, event.at + 1)

    # --- sending a message --------------------------------------------------------------------------------------

    def send(self, text: str) -> None:
        screen = self.screen
        if self._start_failed is not None:
            screen.notify(self._start_failed, title="Not started", severity="error")
            screen.chat_input.restore(text)
            return
        if not screen.didactyl.service_ready or self.queued:
            self._queue(text)
            return
        if screen.streaming:
            screen.notify(BUSY, title="Busy", severity="warning")
            screen.chat_input.restore(text)
            return
        self.run_turn(text)

    def _queue(self, text: str) -> None:
        """Sent before the agent is ready (Enter while the app starts): kept, and sent the moment it is."""
        self.queued.append(text)
        waiting = len(self.queued)
        self.screen.notify(f"{waiting} message{'s' if waiting > 1 else ''} will send when the agent is ready.",
                           title="Queued")
        self.screen.status.activity = f"{waiting} queued · will send when the agent is ready"
        self.send_queued()

    def send_queued(self) -> None:
        if self.queued and not self.screen.streaming and self.screen.didactyl.service_ready:
            self.run_turn(self.queued.pop(0))

    @work_on_screen(exclusive=True, group="turn")
    async def run_turn(self, text: str) -> None:
        from .turn_view import TurnView

        screen = self.screen
        try:
            service = screen.require_service()
        except AgentError:
            screen.chat_input.restore(text)
            raise
        self.model.needed()  # (a regenerated reply comes with no key typed)
        session_id = await self.session(service)
        async with self.opening:  # a chat being read and put on screen (the agent's, at start) is there first:
            pass  # its screen would replace this message's
        turn = TurnView(screen, text, await screen.conversation.add_user(text), self.turn_failed)
        screen.streaming = True
        turn.tell("thinking…")
        silence = screen.set_interval(1.0, turn.tell_silence)  # a stream that stalls says so
        try:
            with turn_running(screen.conversation.reply_path):  # the fast path holds full collections off
                async for event in service.chat.run_turn(session_id, text):
                    await turn.show(event)
        except asyncio.CancelledError:
            await turn.cancelled()
            raise
        finally:
            silence.stop()
            screen.streaming = False
            screen.status.activity = ""
            screen.call_later(self.send_queued)

    def turn_failed(self, error: ErrorEntry, user_entry: MessageEntry) -> None:
        """A failed turn's error entry, remembered with the message that failed (for a retry)."""
        self.failed[error] = user_entry

    async def retry(self, entry: ErrorEntry, text: str) -> None:
        screen = self.screen
        if screen.streaming:  # the failed turn stays as it is, its Retry with it, until this reply ends
            screen.notify(BUSY, title="Busy", severity="warning")
            return
        user_entry = self.failed.pop(entry, None)
        await entry.remove()
        if user_entry is not None:
            await user_entry.remove()
        if screen.chat_input.text == text:
            screen.chat_input.clear()
        self.send(text)

    def cancel(self) -> None:
        self.screen.workers.cancel_group(self.screen, "turn")

    async def stop_turn(self) -> None:
        """Cancel the reply being written and wait for its turn to end (its part so far kept in the chat, marked)."""
        screen = self.screen
        turns = [w for w in screen.workers if w.node is screen and w.group == "turn" and not w.is_finished]
        self.cancel()
        await asyncio.gather(*(w.wait() for w in turns), return_exceptions=True)  # cancelled or failed: ended

    # --- a new chat ------------------------------------------------------------------------------------------------

    async def new_chat(self) -> None:
        screen = self.screen
        self.cancel()
        self.session_id = None
        self.reset_figures()
        for inspector in screen.inspectors():  # the prompts shown are the chat's (a resumed one brings its own)
            inspector.clear()
        await screen.conversation.clear()
        screen.chat_input.focus()

    def reset_figures(self) -> None:
        """A new (or resumed) chat: no prompt yet, no cost yet (a resumed chat's earlier cost is not known)."""
        self.screen.status.prompt_tokens = self.screen.status.session_cost_usd = None

    # --- reply and export ---------------------------------------------------------------------------------------------

    def copy_reply(self) -> None:
        reply = self.screen.conversation.last_reply()
        if reply is None:
            self.screen.notify("No reply to copy yet.", title="Copy")
            return
        self.screen.app.copy_to_clipboard(reply)
        self.screen.notify(f"Copied {len(reply):,} characters.", title="Copy")

    def export(self) -> None:
        self.export_markdown(self.screen.conversation.as_markdown())

    @work_on_screen(group="export")
    async def export_markdown(self, text: str) -> None:
        folder = self.screen.didactyl.data_dir / "exports"
        name = f"chat-{time.strftime('%Y%m%d-%H%M%S')}-{(self.session_id or 'new')[:8]}.md"
        path = await asyncio.to_thread(_write_export, folder / name, text)
        self.screen.notify(str(path), title="Exported")


def _write_export(path: Path, text: str) -> Path:
    """The chat as a new file, 0600 in a 0700 folder (a chat is private), never over another file (a second
    export within the same second gets a number)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent, 0o700)  # a folder an older version made 0755
        for n in range(1, 1000):
            target = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            return target
    except OSError as exc:
        raise AgentError(f"cannot export to {path.parent}: {exc.strerror or exc}", "Export") from None
    raise AgentError(f"cannot export to {path.parent}: too many exports of this chat this second", "Export")
