"""The conversation: messages, inline tool calls and errors, pinned to the bottom while it grows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.containers import VerticalScroll
from textual.widgets import Static

if TYPE_CHECKING:
    from .error_entry import ErrorEntry
    from .message_entry import MessageEntry
    from .tool_call_entry import ToolCallEntry

# Entries are imported when first shown: the first frame only needs an empty column.


class Conversation(VerticalScroll):
    """A scrolling column of entries. The screen drives it; it only renders."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, can_focus=True)
        self._tool_calls: dict[str, ToolCallEntry] = {}

    def on_mount(self) -> None:
        # Stays scrolled to the end as replies stream in, until the user scrolls up.
        self.anchor()

    async def _add(self, widget: Any) -> Any:
        self.query_one("#conversation-empty", Static).display = False
        await self.mount(widget)
        self.anchor()
        return widget

    def compose(self):  # type: ignore[override]
        yield Static(
            "Say something. Enter sends; shift+enter or ctrl+j breaks the line; ctrl+p lists every action.",
            id="conversation-empty",
        )

    # --- entries ----------------------------------------------------------------------------

    async def add_user(self, text: str) -> MessageEntry:
        from .message_entry import MessageEntry

        return await self._add(MessageEntry("user", text))

    async def start_reply(self) -> MessageEntry:
        from .message_entry import MessageEntry

        entry = MessageEntry("assistant", streaming=True)
        entry.add_class("-streaming")
        return await self._add(entry)

    async def add_reply(self, text: str) -> MessageEntry:
        from .message_entry import MessageEntry

        return await self._add(MessageEntry("assistant", text))

    async def tool_started(self, call_id: str, name: str, arguments: dict[str, Any], round_no: int = 1) -> None:
        from .tool_call_entry import ToolCallEntry

        entry = ToolCallEntry(call_id, name, arguments, round_no)
        self._tool_calls[call_id] = entry
        await self._add(entry)

    async def tool_finished(self, call_id: str, name: str, arguments: dict[str, Any], result: str,
                            is_error: bool, round_no: int = 1) -> None:
        from .tool_call_entry import ToolCallEntry

        entry = self._tool_calls.get(call_id)
        if entry is None:
            entry = ToolCallEntry(call_id, name, arguments, round_no)
            self._tool_calls[call_id] = entry
            await self._add(entry)
        entry.set_result(result, is_error)

    async def add_error(self, title: str, message: str, retry_text: str | None) -> ErrorEntry:
        from .error_entry import ErrorEntry

        return await self._add(ErrorEntry(title, message, retry_text))

    async def clear(self) -> None:
        self._tool_calls.clear()
        await self.remove_children(".message, .tool-call, .error-entry")
        self.query_one("#conversation-empty", Static).display = True

    async def load_history(self, messages: list[dict[str, Any]]) -> None:
        """Render stored OpenAI-format messages (a resumed chat)."""
        import json

        await self.clear()
        for msg in messages:
            role = msg.get("role")
            content = msg.get("content")
            text = content if isinstance(content, str) else ""
            if role == "user":
                await self.add_user(text)
            elif role == "assistant":
                if text:
                    await self.add_reply(text)
                for call in msg.get("tool_calls") or []:
                    fn = call.get("function", {})
                    try:
                        args = json.loads(fn.get("arguments") or "{}")
                    except ValueError:
                        args = {"raw": fn.get("arguments")}
                    await self.tool_started(call.get("id", ""), fn.get("name", "?"), args)
            elif role == "tool":
                entry = self._tool_calls.get(msg.get("tool_call_id", ""))
                if entry is not None:
                    entry.set_result(text, False)

    # --- reading back -------------------------------------------------------------------------

    def last_reply(self) -> str | None:
        from .message_entry import MessageEntry

        replies = [e for e in self.query(MessageEntry) if e.role == "assistant" and e.text]
        return replies[-1].text if replies else None

    def as_markdown(self, title: str = "Conversation") -> str:
        """The conversation as a markdown document (messages, then tool calls as fenced JSON)."""
        from .message_entry import MessageEntry
        from .tool_call_entry import ToolCallEntry, pretty_json

        out = [f"# {title}", ""]
        for child in self.children:
            if isinstance(child, MessageEntry):
                out += [f"## {'You' if child.role == 'user' else 'Agent'}", "", child.text, ""]
            elif isinstance(child, ToolCallEntry):
                out += [f"### Tool call: {child.tool_name}", "", "```json", pretty_json(child.arguments), "```", ""]
                if child.result is not None:
                    out += ["Result:", "", "```", pretty_json(child.result), "```", ""]
        return "\n".join(out).rstrip() + "\n"
