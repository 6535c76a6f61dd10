"""The multi-line message input: Enter sends, a key for newline, up/down walk the history."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from ..actions import bindings


class ChatInput(TextArea):
    """A TextArea where Enter sends and ``newline`` (shift+enter / ctrl+j) breaks the line.

    Up on the first line and down on the last line walk the sent-message history, like a shell.
    """

    BINDINGS = bindings("chat_input")

    @dataclass
    class Submitted(Message):
        """The user sent a message."""

        chat_input: ChatInput
        text: str

        @property
        def control(self) -> ChatInput:
            return self.chat_input

    @dataclass
    class TypingStarted(Message):
        """The first key reached this box: a message, and so a reply, is on its way (the app loads the reply
        view's markdown meanwhile)."""

        chat_input: ChatInput

        @property
        def control(self) -> ChatInput:
            return self.chat_input

    def __init__(self, *, id: str | None = None, placeholder: str = "") -> None:
        super().__init__(
            "",
            id=id,
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            compact=True,
            placeholder=placeholder,
        )
        self._sent: list[str] = []
        self._sent_pos: int | None = None  # index into _sent while walking it
        self._draft = ""  # what was typed before walking the history
        self._typing_started = False

    # --- history --------------------------------------------------------------------------

    @property
    def sent_history(self) -> list[str]:
        """Messages sent from this input, oldest first (TextArea's own ``history`` is its undo stack)."""
        return list(self._sent)

    def remember(self, text: str) -> None:
        """Add a sent message to the history (consecutive duplicates collapse)."""
        if text and (not self._sent or self._sent[-1] != text):
            self._sent.append(text)
        self._sent_pos = None

    def restore(self, text: str) -> None:
        """Put text back (after an LLM failure) with the cursor at its end."""
        self.load_text(text)
        self.move_cursor(self.document.end)
        self._sent_pos = None

    def _show_sent(self, pos: int | None) -> None:
        self._sent_pos = pos
        self.load_text(self._draft if pos is None else self._sent[pos])
        self.move_cursor(self.document.end)

    def action_cursor_up(self, select: bool = False) -> None:
        if select or self.cursor_location[0] > 0 or not self._sent:
            super().action_cursor_up(select)
            return
        if self._sent_pos is None:
            self._draft = self.text
            self._show_sent(len(self._sent) - 1)
        elif self._sent_pos > 0:
            self._show_sent(self._sent_pos - 1)

    def action_cursor_down(self, select: bool = False) -> None:
        last_row = self.document.line_count - 1
        if select or self.cursor_location[0] < last_row or self._sent_pos is None:
            super().action_cursor_down(select)
            return
        nxt = self._sent_pos + 1
        self._show_sent(nxt if nxt < len(self._sent) else None)

    # --- sending ----------------------------------------------------------------------------

    async def on_key(self, event: events.Key) -> None:
        """Send and newline run here, in the order the keys arrived, not as priority bindings: in a burst
        ("hi there" + Enter in one read of the terminal) the app reads Enter before this widget has inserted
        the characters queued ahead of it, so a priority binding would send an empty box. This handler runs
        before the TextArea's own (a subclass's comes first); preventing the default stops the TextArea's."""
        from ..streaming import note_input

        note_input()  # a collection put off by a streaming reply waits until typing pauses
        if not self._typing_started:
            self._typing_started = True
            self.post_message(self.TypingStarted(self))
        if not event.is_printable:
            active = self.screen.active_bindings.get(event.key)  # with the [keys] remaps applied
            if active is not None and active.node is self and active.binding.action in ("send", "newline"):
                event.stop()
                event.prevent_default()
                await self.run_action(active.binding.action)

    def action_send(self) -> None:
        text = self.text
        if not text.strip():
            return
        self.remember(text)
        self.clear()
        self.post_message(self.Submitted(self, text))

    def action_newline(self) -> None:
        if self.read_only:
            return
        start, end = self.selection
        self.replace("\n", start, end, maintain_selection_offset=False)  # as the TextArea inserts a typed key
