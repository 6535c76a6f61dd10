"""One turn on the main screen: the agent's events drawn into the conversation, the status bar and the
inspector as they stream in."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from textual.content import Content

from ...actions import keys_for
from ..widgets.assembly_tree import prompt_tokens

if TYPE_CHECKING:
    from ...config import Config
    from ...service.screen_api import ScreenService
    from ...service.types import AgentEvent, PromptAssembly, TurnFailed, TurnFinished
    from ..widgets.chat_input import ChatInput
    from ..widgets.conversation import Conversation
    from ..widgets.error_entry import ErrorEntry
    from ..widgets.message_entry import MessageEntry
    from ..widgets.prompt_inspector import PromptInspector
    from ..widgets.status_bar import StatusBar



class TurnScreen(Protocol):
    """What a turn draws into (the main screen is one)."""

    config: Config

    @property
    def status(self) -> StatusBar: ...

    @property
    def conversation(self) -> Conversation: ...

    @property
    def chat_input(self) -> ChatInput: ...

    def inspectors(self) -> list[PromptInspector]: ...

    def require_service(self) -> ScreenService: ...

    def notify(self, message: str, *, title: str = ..., severity: Any = ..., timeout: float | None = ...) -> None: ...


class TurnView:
    def __init__(self, screen: TurnScreen, text: str, user_entry: MessageEntry,
                 failed: Callable[[ErrorEntry, MessageEntry], None]) -> None:
        """``failed``: told of a failed turn's error entry and the message that failed (kept for its retry)."""
        self.screen, self.text, self.user_entry, self.on_failed = screen, text, user_entry, failed
        self.reply: MessageEntry | None = None  # the reply being streamed, if any
        self.assembly: PromptAssembly | None = None  # this turn's prompt, once assembled
        self.said_something = False  # text or a tool call came before the turn ended
        self.heard_at = time.monotonic()  # when the model last sent something (or was asked)
        self.running_tools = 0  # calls started and not finished: the silence is theirs, not the model's
        self.activity = ""  # what the turn is doing, as the status bar says it
        self.silent_entry: MessageEntry | None = None  # the message whose frame says the model is silent
        self.text_complete = False  # the reply on screen is whole (TextComplete): the turn's end adds nothing

    def tell(self, activity: str) -> None:
        self.activity = self.screen.status.activity = activity

    def tell_silence(self) -> None:
        """(A timer, every second.) Waiting on the model ``[llm] stall_notice_s`` or more: how long, and how to stop,
        on the frame of the reply being written (or of the message waiting for one) and in the status bar."""
        quiet = time.monotonic() - self.heard_at
        if self.running_tools or quiet < self.screen.config.llm.stall_notice_s:
            return
        notice = f"no word from the model for {quiet:.0f} s · {keys_for('cancel', self.screen.config.keys)} cancels"
        self.screen.status.activity = f"{self.activity} {notice}"
        self.silent_entry = self.reply or self.user_entry
        self.silent_entry.border_subtitle = Content(notice)  # the key's name comes from the config: not markup

    def silence_over(self) -> None:
        self.screen.status.activity = self.activity
        if self.silent_entry is not None:
            self.silent_entry.border_subtitle = ""
            self.silent_entry = None

    async def end_reply(self, note: str | None = None) -> None:
        if self.reply is not None:
            await self.reply.finish(note)
            self.reply = None

    def mark_unanswered(self, status: str, mark: str = "") -> None:
        """The user's message stays (and is saved so, marked): this turn got no whole answer (``mark``: said
        otherwise, e.g. "not delivered")."""
        self.user_entry.mark_unanswered(status, in_part=self.said_something, mark=mark)

    async def cancelled(self) -> None:
        """Esc (or quitting) ended the turn: the reply so far and any call still running show so, as kept."""
        from ...service.types import NOT_FINISHED

        self.silence_over()
        await self.end_reply("cancelled")
        self.screen.conversation.end_running_tools(NOT_FINISHED)
        self.mark_unanswered("cancelled")

    async def show(self, event: AgentEvent) -> None:
        from ...service.types import (
            TextComplete,
            TextDelta,
            ToolCallFinished,
            ToolCallStarted,
            TurnFailed,
            TurnFinished,
            TurnStarted,
        )

        status, conversation = self.screen.status, self.screen.conversation
        self.heard_at = time.monotonic()
        self.silence_over()
        match event:
            case TurnStarted(assembly=assembly):  # the inspector gets it from the service's PromptAssembled
                status.prompt_tokens, status.tokens_estimated = prompt_tokens(assembly, None)
                self.assembly = assembly
                status.context_window = self.screen.require_service().model.context_window()
            case TextDelta(text=text):
                self.said_something = True
                if self.reply is None:
                    self.reply = await conversation.start_reply()
                    self.tell("writing…")
                await self.reply.feed(text)
            case TextComplete():
                # The model's text is whole: its last words go on screen now, not when the stream has closed
                # and the turn is kept (TurnFinished, tens of ms later).
                if self.reply is not None:
                    self.text_complete = True
                    await self.end_reply()
            case ToolCallStarted():
                self.said_something = True
                self.text_complete = False  # a round goes on after all: its answer is a reply of its own
                self.running_tools += 1
                await self.end_reply()  # text before a tool call stays above it
                self.tell(f"running {event.name}…")
                await conversation.tool_started(event.call_id, event.name, event.arguments, event.round)
            case ToolCallFinished():
                self.running_tools -= 1
                if not self.running_tools:
                    self.tell("thinking…")  # the results go back to the model
                await conversation.tool_finished(event.call_id, event.name, event.arguments, event.result,
                                                 event.ending, event.round, event.permission)
            case TurnFinished():
                await self._finished(event)
            case TurnFailed():
                await self._failed(event)

    async def _finished(self, event: TurnFinished) -> None:
        screen, conversation = self.screen, self.screen.conversation
        if self.reply is not None:
            await self.end_reply()
        elif event.reply and not self.text_complete and conversation.last_reply() != event.reply:
            await conversation.add_reply(event.reply)
        for inspector in screen.inspectors():
            inspector.finish_turn(event)
        usage: Any = event.usage
        if self.assembly is not None:  # the inspector's count of this turn, the same function
            screen.status.prompt_tokens, screen.status.tokens_estimated = prompt_tokens(self.assembly, usage)
        screen.status.context_window = screen.require_service().model.context_window()
        if usage.cost_usd is not None:
            screen.status.session_cost_usd = (screen.status.session_cost_usd or 0.0) + usage.cost_usd
        if event.cut:  # a bound ended the turn early: the reply shown is partial (and ends with a marker)
            screen.notify(f"The reply was cut short: {event.cut}.", title="Reply cut short", severity="warning",
                          timeout=10)

    async def _failed(self, event: TurnFailed) -> None:
        screen = self.screen
        await self.end_reply("interrupted")
        self.mark_unanswered("failed", event.mark)
        error = await screen.conversation.add_error(event.title, event.message,
                                                    self.text if event.retryable else None)
        self.on_failed(error, self.user_entry)
        for inspector in screen.inspectors():
            inspector.fail_turn(event.message)
        if not screen.chat_input.text.strip():
            screen.chat_input.restore(self.text)  # the user's words are never lost
