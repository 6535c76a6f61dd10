"""The conversation: messages, inline tool calls and errors, pinned to the bottom while it grows."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from ..streaming import chat_cleared, choose_path
from ..streaming.reply import ReplyPath

if TYPE_CHECKING:
    from textual.app import ComposeResult

    from .error_entry import ErrorEntry
    from .history_stub import EntrySpec, HistoryStub
    from .message_entry import MessageEntry
    from .tool_call_entry import ToolCallEntry

# Entries are imported when first shown: the first frame only needs an empty column.

TAIL_SCREENS = 2  # a resumed chat mounts full entries for this many screens above its end
FIRST_FRAME_SCREENS = 1  # in the app's first frame (`didactyl --continue`): one screen, the next after that frame
TAIL_MIN_ENTRIES = 4
MATERIALIZE_BATCH = 12  # older entries rendered per step while scrolling up
STREAMING_FOLD_MARGIN_SCREENS = 0.25  # the parts of a reply that is streaming, which the view follows
FOLD_MARGIN_SCREENS = 1.0  # entries (and parts of a long reply) further than this from the viewport fold


class Conversation(VerticalScroll):
    """A scrolling column of entries. The screen drives it; it only renders."""

    def __init__(self, *, id: str | None = None, reply_path: ReplyPath | None = None) -> None:
        super().__init__(id=id, can_focus=True)
        self.reply_path = reply_path or choose_path()  # how messages are rendered and replies streamed
        self._tool_calls: dict[str, ToolCallEntry] = {}
        self._materialize_queued = False
        self._materializing = False
        self._refold_queued = False
        self._laid_out_width = 0
        # Clearing (a new chat, a resume) and swapping stubs for entries both rebuild the children across
        # awaits: one at a time, or a stub being swapped survives the clear.
        self._rebuilding = asyncio.Lock()

    def on_mount(self) -> None:
        # Stays scrolled to the end as replies stream in, until the user scrolls up.
        self.anchor()

    async def _add(self, widget: Any) -> Any:
        self.query_one("#conversation-empty", Static).display = False
        await self.mount(widget)
        self.anchor()
        self.refold_soon()
        return widget

    def compose(self) -> ComposeResult:
        yield Static(
            "Say something. Enter sends; shift+enter or ctrl+j breaks the line; ctrl+p lists every action.",
            id="conversation-empty",
        )

    # --- entries ----------------------------------------------------------------------------

    async def add_user(self, text: str) -> MessageEntry:
        from .message_entry import MessageEntry

        return await self._add(MessageEntry("user", text, path=self.reply_path))

    async def start_reply(self) -> MessageEntry:
        from .message_entry import MessageEntry

        return await self._add(MessageEntry("assistant", streaming=True, path=self.reply_path))

    async def add_reply(self, text: str) -> MessageEntry:
        from .message_entry import MessageEntry

        return await self._add(MessageEntry("assistant", text, path=self.reply_path))

    async def tool_started(self, call_id: str, name: str, arguments: dict[str, Any], round_no: int = 1) -> None:
        from .tool_call_entry import ToolCallEntry

        entry = ToolCallEntry(call_id, name, arguments, round_no)
        self._tool_calls[call_id] = entry
        await self._add(entry)

    async def tool_finished(self, call_id: str, name: str, arguments: dict[str, Any], result: str,
                            ending: str, round_no: int = 1, permission: str = "") -> None:
        """A call ended; ``permission``: who allowed or denied it (a tool that acts), shown in its title."""
        from .tool_call_entry import ToolCallEntry

        entry = self._tool_calls.get(call_id)
        if entry is None:
            entry = ToolCallEntry(call_id, name, arguments, round_no)
            self._tool_calls[call_id] = entry
            await self._add(entry)
        entry.set_result(result, ending, permission)

    def end_running_tools(self, result: str) -> None:
        """The turn ended while calls ran (cancelled): they show so, with ``result`` (as the chat keeps them)."""
        for entry in self._tool_calls.values():
            if not entry.ending:
                entry.set_result(result, "cancelled")

    async def add_error(self, title: str, message: str, retry_text: str | None) -> ErrorEntry:
        from .error_entry import ErrorEntry

        return await self._add(ErrorEntry(title, message, retry_text))

    async def clear(self) -> None:
        async with self._rebuilding:
            await self._clear()

    async def _clear(self) -> None:
        self._tool_calls.clear()
        shown = self.query_children(".message, .tool-call, .error-entry, .history-stub, .history-pending, .fold-spacer")
        if shown:
            await shown.remove()
            # Textual's child list caches its displayed children until they are next read, and the conversation's
            # are not read in its layout: the chat just removed (a long reply: ~2,600 widgets, ~25 MiB) stayed
            # alive until the next reply's frames read them. Read now, the cache lets go of it (#34, found with gc).
            self.displayed_children  # noqa: B018
            chat_cleared()  # and its garbage is collected (its memory handed back) once the keyboard is quiet
        self.query_one("#conversation-empty", Static).display = True

    async def load_history(self, messages: list[dict[str, Any]], *, earlier: int = 0, chat: str = "",
                           screens: float = TAIL_SCREENS) -> None:
        """Render stored OpenAI-format messages (a resumed chat) in one batch, whatever their number.

        Only the last screens become full entries; everything older waits in a :class:`HistoryStub` at its
        estimated height and is rendered when scrolled to. One ``mount_all``: one layout pass, not one per
        message. ``earlier``: how many older messages of chat ``chat`` are still being read (a chat opens on its
        end): a line above says so until :meth:`load_earlier` brings them. ``screens``: how many screens above the end
        are full entries now (the rest follow near the viewport after the next frame).
        """
        from .history_stub import specs_from_messages

        async with self._rebuilding:
            await self._clear()
            pending = [Static(Content(f"⋯ {earlier:,} earlier messages, being read…"), name=chat,
                              classes="history-pending")] if earlier else []
            await self._mount_history(specs_from_messages(messages), pending, screens)
        self.anchor()
        self.call_after_refresh(self.materialize_near_viewport)

    async def load_earlier(self, messages: list[dict[str, Any]], *, chat: str = "") -> None:
        """The messages of chat ``chat`` before those :meth:`load_history` showed: one stub in place of the line that
        said they were being read (their entries made and measured on a worker thread), the view left where it is.
        Nothing when that line is gone (another chat is shown)."""
        from .history_stub import HistoryStub, stub_data

        specs, heights = await asyncio.to_thread(stub_data, messages, self._entry_width())
        async with self._rebuilding:
            pending = [line for line in self.query(".history-pending") if line.name == chat]
            if not pending:
                return  # cleared meanwhile (a new chat, another resumed)
            line = pending[0]
            pinned, shown = self._pinned_to_end(), line.outer_size.height + line.styles.margin.top
            stub = HistoryStub(specs, heights)
            await self.mount(stub, before=line)
            await line.remove()
        if not pinned:  # scrolled up meanwhile: what is read stays in place
            self.call_after_refresh(self._keep_view, [stub], shown)
        self.call_after_refresh(self.materialize_near_viewport)

    async def _mount_history(self, specs: list[EntrySpec], before: list[Any] | None = None,
                             screens: float = TAIL_SCREENS) -> None:
        from .history_stub import HistoryStub, estimate_height

        if not specs and not before:
            return
        width = self._entry_width()
        heights = [estimate_height(spec, width) for spec in specs]
        wanted = max(self.size.height, self.app.size.height) * screens
        first, rows = len(specs), 0
        while first > 0 and (rows < wanted or len(specs) - first < TAIL_MIN_ENTRIES):
            first -= 1
            rows += heights[first]
        widgets: list[Any] = list(before or [])
        if first > 0:
            widgets.append(HistoryStub(specs[:first], heights[:first]))
        widgets += [self._entry_for(spec) for spec in specs[first:]]
        self.query_one("#conversation-empty", Static).display = False
        await self.mount_all(widgets)

    def _entry_width(self) -> int:
        width = self.scrollable_content_region.width or self.app.size.width
        return max(20, width)

    def _entry_for(self, spec: EntrySpec) -> Any:
        """The full widget for one stored entry."""
        if spec.role == "tool":
            from .tool_call_entry import ToolCallEntry

            entry = ToolCallEntry(spec.call_id, spec.name, spec.arguments)
            self._tool_calls[spec.call_id] = entry
            if spec.result is not None:
                entry.set_result(spec.result, spec.ending)
            return entry
        from .message_entry import MessageEntry, noted

        if spec.role == "user":
            message = MessageEntry("user", spec.text, path=self.reply_path)
            if spec.status:  # a failed or cancelled turn's message: kept, marked, never resent
                message.mark_unanswered(spec.status, in_part=spec.answered_in_part)
            return message
        # A reply cut off by a cancel or a failure ends with why, as it did on screen.
        return MessageEntry(spec.role, noted(spec.text, spec.status or None), path=self.reply_path)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.refold_soon()
        if self._stubs_left() and not self._materialize_queued:
            self._materialize_queued = True
            self.call_after_refresh(self.materialize_near_viewport)

    def _stubs_left(self) -> list[HistoryStub]:
        # By class, not isinstance: scrolling starts at mount, before the first frame, which imports no stub.
        return [child for child in self.children if child.has_class("history-stub")]  # type: ignore[misc]

    async def materialize_near_viewport(self) -> None:
        """Swap the part of any stub within a screen of the viewport for real entries (a batch at a time).

        Entries rendered above the viewport shift the view by what their estimated heights missed, so the
        text being read does not jump.
        """
        self._materialize_queued = False
        if self._materializing:
            return
        self._materializing = True
        swapped = False
        try:
            async with self._rebuilding:
                swapped = await self._swap_one_batch()
        finally:
            self._materializing = False
        if swapped:  # more may be within reach once this batch is laid out; nothing swapped: wait for a scroll
            self.call_after_refresh(self._materialize_again)

    async def _swap_one_batch(self) -> bool:
        """Swap one batch of one stub near the viewport; whether anything was swapped."""
        from .history_stub import HistoryStub

        view_top = round(self.scroll_y)
        margin = self.scrollable_content_region.height or self.app.size.height
        window = (view_top - margin, view_top + 2 * margin)
        for stub in reversed(self._stubs_left()):
            region = stub.virtual_region
            if region.height == 0 or region.bottom <= window[0] or region.y >= window[1]:
                continue
            first, last = stub.split_at_rows(window[0] - region.y, window[1] - region.y, MATERIALIZE_BATCH)
            parts: list[Any] = []
            if first > 0:
                parts.append(HistoryStub(stub.specs[:first], stub.heights[:first]))
            entries = [self._entry_for(spec) for spec in stub.specs[first:last]]
            parts += entries
            if last < len(stub.specs):
                parts.append(HistoryStub(stub.specs[last:], stub.heights[last:]))
            mounting = self.mount_all(parts, before=stub)  # children at once; mounted when awaited
            stub.replaced = True  # read back (export, copy) from its replacements from now on, never twice
            await mounting
            await stub.remove()
            if region.bottom <= view_top and not self._pinned_to_end():
                # Above the viewport: once laid out, shift by what the estimate missed, so the text in
                # view stays where it is.
                self.call_after_refresh(self._keep_view, entries, sum(stub.heights[first:last]))
            return True  # one batch per pass; the next scroll (or the caller's check) asks for more
        return False

    def _materialize_again(self) -> None:  # after a refresh: the new entries are laid out
        if not self._materialize_queued:
            self._materialize_queued = True
            self.call_after_refresh(self.materialize_near_viewport)

    def _pinned_to_end(self) -> bool:
        # Anchored and not scrolled away from the end (scrolling up releases the anchor until the end is back).
        return self.is_anchored and self.scroll_y >= self.max_scroll_y

    def _keep_view(self, entries: list[Any], estimated: int) -> None:
        actual = sum(e.outer_size.height + e.styles.margin.top for e in entries if e.parent is self)
        if actual and actual != estimated:
            self.scroll_to(y=self.scroll_y + actual - estimated, animate=False, immediate=True)

    # --- folding: what is far from the viewport costs no layout (fold.py) ----------------------------

    def refold_soon(self) -> None:
        if not self._refold_queued:
            self._refold_queued = True
            self.call_after_refresh(self._refold)

    def _message_entries(self) -> list[MessageEntry]:
        from .message_entry import MessageEntry

        return [child for child in self.children if isinstance(child, MessageEntry)]

    def _has_entries(self) -> bool:
        # By CSS class: before the first message (the first frame) no entry module is imported.
        return any(child.has_class("message") for child in self.children)

    def _refold(self) -> None:
        self._refold_queued = False
        if not self._has_entries():
            return
        from .fold import refold

        entries = self._message_entries()
        if not self._stubs_left():  # a resumed chat's stubs place entries by geometry: whole entries wait
            refold(self, [e for e in entries if not e.streaming], FOLD_MARGIN_SCREENS)
        following = self.scroll_y >= self.max_scroll_y
        for entry in entries:
            if entry.display:
                # A streaming reply's view follows its end: fewer blocks kept near it, a cheaper layout pass.
                margin = STREAMING_FOLD_MARGIN_SCREENS if entry.streaming else FOLD_MARGIN_SCREENS
                # While the view follows a streaming reply, its painter folds its parts, inside a paint (below).
                refold(self, entry.finished_parts(), margin, fold_far=not (entry.streaming and following))

    def fold_streaming_parts(self, entry: MessageEntry) -> None:
        """Fold the parts of a streaming reply far from the viewport, now. Its painter calls this at the start of
        a paint: the folds land in that paint's layout pass, not in one more pass of their own after each scroll
        (measured ~one a paint). The geometry is the last pass's: a part that the paint pushes away waits for the
        next paint."""
        from .fold import refold

        refold(self, entry.finished_parts(), STREAMING_FOLD_MARGIN_SCREENS)

    def on_resize(self) -> None:
        width = self.size.width
        if width != self._laid_out_width and self._has_entries():  # folded heights were for the old width
            from .fold import unfold

            self._laid_out_width = width
            for entry in self._message_entries():
                unfold(entry)
                for part in entry.finished_parts():
                    unfold(part)
        self.refold_soon()

    # --- reading back -------------------------------------------------------------------------

    def last_reply(self) -> str | None:
        from .history_stub import HistoryStub
        from .message_entry import MessageEntry

        for child in reversed(self.children):
            if isinstance(child, MessageEntry) and child.role == "assistant" and child.text:
                return child.text
            if isinstance(child, HistoryStub) and not child.replaced:
                for spec in reversed(child.specs):
                    if spec.role == "assistant" and spec.text:
                        return spec.text
        return None

    def as_markdown(self, title: str = "Conversation") -> str:
        """The conversation as a markdown document (messages, then tool calls as fenced JSON)."""
        from .history_stub import HistoryStub
        from .message_entry import MessageEntry
        from .tool_call_entry import ToolCallEntry

        out = [f"# {title}", ""]
        for child in self.children:
            if isinstance(child, MessageEntry):
                out += _message_markdown(child.role, child.text)
            elif isinstance(child, ToolCallEntry):
                out += _tool_call_markdown(child.tool_name, child.arguments, child.result)
            elif isinstance(child, HistoryStub) and not child.replaced:
                for spec in child.specs:
                    if spec.role == "tool":
                        out += _tool_call_markdown(spec.name, spec.arguments, spec.result)
                    else:
                        out += _message_markdown(spec.role, spec.text)
        return "\n".join(out).rstrip() + "\n"


def _message_markdown(role: str, text: str) -> list[str]:
    return [f"## {'You' if role == 'user' else 'Agent'}", "", text, ""]


def _tool_call_markdown(name: str, arguments: Any, result: str | None) -> list[str]:
    from .tool_call_entry import pretty_json

    out = [f"### Tool call: {name}", "", "```json", pretty_json(arguments), "```", ""]
    if result is not None:
        out += ["Result:", "", "```", pretty_json(result), "```", ""]
    return out
