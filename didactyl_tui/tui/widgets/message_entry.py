"""One message in the conversation (the user's or the agent's), rendered as markdown.

A streaming reply is fed token deltas with :meth:`MessageEntry.feed` and painted by one throttle: each paint
appends the new text to the Markdown widget (``Markdown.append`` re-parses only the last block; finished blocks
stay as they are), then waits until the frame is composed and measures what the paint cost. The next paint
waits long enough for painting to take at most ``PAINT_SHARE`` of the time (and at least ``MIN_PAINT_GAP_S``),
so a long reply paints less often instead of starving the keyboard and the model stream of the event loop.

A long reply streams into a column of Markdown parts: past ``PART_BLOCKS`` blocks the live part hands its
growing last block to a fresh part and is never touched again, so an append costs the same at the end of a
10,000-token reply as at its start; parts far from the viewport are folded by the conversation (``fold.py``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.timer import Timer

from ...terminal_text import StreamCleaner, clean

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.rules_core import StateCore
    from textual.widgets import Markdown

    from .live_tail import LiveTail

PAINT_DEFER_S = 0.005  # a paint due while keys wait is put off by this much
MAX_PAINT_DEFERRALS = 6  # at most this many times in a row
MIN_PAINT_GAP_S = 0.04  # at most ~25 paints a second
MAX_PAINT_GAP_S = 0.25  # and at least 4 (a slow first paint, e.g. markdown-it's import, must not stall the rest)
PAINT_SHARE = 0.5  # while streaming, painting may take this share of the time; the rest is for keys and input
# Text handed to the Markdown per paint. Textual holds every frame while an append mounts its new blocks, so an
# unbounded catch-up paint after a burst would freeze the screen (and the echo of keys) for its whole length.
MAX_PAINT_CHARS = 2_000
PART_BLOCKS = 6  # a streaming reply's live Markdown hands over to a new part beyond this many blocks


class MessageEntry(Vertical):
    """A user or assistant message."""

    def __init__(self, role: str, text: str = "", *, streaming: bool = False) -> None:
        super().__init__(classes=f"message -{role}")
        self.role = role
        # The model's words (and the user's pasted text) are outside text: cleaned before they are painted.
        self._text = clean(text)
        self._cleaner = StreamCleaner()  # a streamed reply: a sequence cut between two pieces goes whole
        self._painted = 0 if streaming else len(self._text)  # characters on screen (the Markdown's and the tail's)
        self._timer: Timer | None = None
        self._paint_lock = asyncio.Lock()
        self._waiting_for_frame = False
        self._next_paint_at = 0.0
        self._deferred = 0  # paints put off in a row because input was waiting
        self._frozen: list[str] = []  # the source of each finished part (all but the live, last one)
        self._live: Markdown | None = None
        self._handed = self._painted  # characters given to the Markdown (the rest of the painted text is the tail)
        self._tail: LiveTail | None = None  # a streamed reply's unfinished last block, as plain text
        self.streaming = streaming
        self.border_title = "you" if role == "user" else "agent"

    @property
    def text(self) -> str:
        """The whole message so far (including deltas not yet painted)."""
        return self._text

    @property
    def painted_text(self) -> str:
        """What is on screen: the Markdown's blocks and the live tail (``text`` once painting caught up)."""
        return self._text[: self._painted]

    def compose(self) -> ComposeResult:
        from .message_part import MessagePart  # markdown-it is not needed for the first (empty) frame

        # The user's own line breaks are kept (a single newline is only a space in markdown); replies stay
        # plain markdown.
        factory = _user_parser if self.role == "user" else None
        self._live = MessagePart(self._text if not self.streaming else "", classes="message-body",
                                 parser_factory=factory)
        yield self._live
        if self.streaming:
            from .live_tail import LiveTail

            self._tail = LiveTail()
            yield self._tail

    @property
    def markdown(self) -> Markdown:
        """The live (last) Markdown part: the only one a streamed reply still appends to."""
        assert self._live is not None, "not composed yet"
        return self._live

    def finished_parts(self) -> list[Markdown]:
        """The parts above the live one (a long streamed reply's finished blocks), folded or not."""
        from textual.widgets import Markdown

        return [child for child in self.children if isinstance(child, Markdown) and child is not self._live]

    @property
    def part_sources(self) -> list[str]:
        """The markdown source of each part, top to bottom (one part unless a long reply streamed in)."""
        return [*self._frozen, self.markdown.source]

    async def feed(self, delta: str) -> None:
        """Add a streamed piece of the reply; painted by the throttle (returns at once: never waits for a paint)."""
        delta = self._cleaner.feed(delta)
        if not delta:
            return
        self._text += delta
        self._schedule_paint()

    def _schedule_paint(self) -> None:
        if self._timer is not None or self._waiting_for_frame or self._paint_lock.locked():
            return  # a paint is due or running; it takes everything that arrived meanwhile
        # Never a zero delay: Textual's timer divides by its interval when it runs late, and dies silently.
        self._timer = self.set_timer(max(0.001, self._next_paint_at - time.monotonic()), self._paint)

    async def _paint(self) -> None:
        self._timer = None
        if self._input_waiting() and self._deferred < MAX_PAINT_DEFERRALS:
            # Keys first: the app has input queued; paint right after it (a few times at most, never starved).
            self._deferred += 1
            self._timer = self.set_timer(PAINT_DEFER_S, self._paint)
            return
        self._deferred = 0
        started = time.thread_time()
        painted = await self._append_unpainted()
        if painted:
            # The cost is this thread's CPU time from the append to the composed frame (parse, mount, layout,
            # render, and the model stream's chunks read meanwhile on this loop): painting backs off as it gets
            # expensive, so the stream and the keys keep most of the loop.
            self._waiting_for_frame = True
            self.call_after_refresh(self._frame_composed, started)

    async def _keys_through(self) -> None:
        await asyncio.sleep(0)
        for _ in range(MAX_PAINT_DEFERRALS):
            if not self._input_waiting():
                return
            await asyncio.sleep(PAINT_DEFER_S)

    def _input_waiting(self) -> bool:
        """A key is on its way to the screen: queued in the app, queued at the focused widget, or handled with
        its echo not painted yet. A paint holds every frame while it mounts, so it goes after the echo."""
        from ..one_layout import echo_pending

        return echo_pending(self.screen, self.parent)

    async def _append_unpainted(self) -> bool:
        """Paint at most ``MAX_PAINT_CHARS`` more: finished blocks go to the Markdown, the unfinished last
        block to the plain tail (all of it to the Markdown once the reply has ended)."""
        async with self._paint_lock:
            end = min(len(self._text), self._painted + MAX_PAINT_CHARS)
            if self.streaming and self._tail is not None:
                from .live_tail import finished_length

                cut = self._handed + finished_length(self._text[self._handed:min(end, self._handed + MAX_PAINT_CHARS)])
            else:
                cut = min(end, self._handed + MAX_PAINT_CHARS)
            if end <= self._painted and cut <= self._handed:
                return False
            self._painted = max(self._painted, end)
            if cut > self._handed:
                markdown = self.markdown
                text = self._text[self._handed:cut]
                if self.streaming and self._tail is not None and hasattr(markdown, "append_blocks"):
                    await markdown.append_blocks(text)  # whole blocks: none re-parsed, frames not held
                else:
                    await markdown.append(text)
                self._handed = cut
                if self.streaming and len(markdown.children) > PART_BLOCKS and self.is_attached:
                    await self._start_next_part(markdown)
            if self._tail is not None:
                self._tail.show(self._text[self._handed:self._painted])
                if not self.streaming and self._handed >= len(self._text):
                    tail, self._tail = self._tail, None
                    await tail.remove()
            return True

    async def _start_next_part(self, markdown: Markdown) -> None:
        """Leave the live part's finished blocks where they are and go on in a fresh Markdown part.

        The still-growing last block moves to the new part (it is re-parsed from its first line there: a
        block may span lines, e.g. an open fence or a list). Finished blocks are neither re-parsed nor
        re-mounted, and each append re-parses and lays out a part of at most ``PART_BLOCKS`` blocks.
        """
        last = markdown.children[-1]
        cut = getattr(last, "source_range", (0, 0))[0]
        lines = markdown.source.splitlines(keepends=True)
        if cut <= 0 or cut >= len(lines):
            return
        from .message_part import MessagePart

        part = MessagePart("", classes="message-body")
        with self.app.batch_update():
            await last.remove()
            await self.mount(part, before=self._tail if self._tail is not None and self._tail.parent else None)
            await part.append_blocks("".join(lines[cut:]))
        self._frozen.append("".join(lines[:cut]))
        self._live = part
        self._join_parts(part)
        if self.parent is not None and hasattr(self.parent, "refold_soon"):
            self.parent.refold_soon()

    def _join_parts(self, part: Markdown) -> None:
        """Space a new part from the one above as the blocks of one Markdown are spaced: the larger of the
        upper block's bottom margin (already inside the part above) and this part's first block's top one."""
        first = part.children[0] if part.children else None
        overlap = min(1, first.styles.margin.top) if first is not None else 0
        part.styles.margin = (-overlap, 0, -1, 0) if overlap else None

    def _frame_composed(self, started: float) -> None:
        cost = time.thread_time() - started
        self._waiting_for_frame = False
        gap = min(MAX_PAINT_GAP_S, max(MIN_PAINT_GAP_S, cost * (1 - PAINT_SHARE) / PAINT_SHARE))
        self._next_paint_at = time.monotonic() + gap
        if self.streaming and self._painted < len(self._text):
            self._schedule_paint()

    async def finish(self, note: str | None = None) -> None:
        """End streaming: paint what is left, then append ``note`` (e.g. "cancelled") in italics."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._text += self._cleaner.flush()  # what was held back as a possible escape sequence
        if note:
            self._text += f"\n\n*({note})*" if self._text else f"*({note})*"
        self.streaming = False
        while await self._append_unpainted():
            await self._keys_through()  # between bounded paints, a key typed meanwhile is echoed first
        self._streaming_border(False)

    def on_mount(self) -> None:
        if self.streaming:
            self._streaming_border(True)

    def _streaming_border(self, on: bool) -> None:
        """The accent border while streaming, as an inline style: toggling a class would restyle every
        markdown block below this widget (hundreds in a long reply) at the moment the last token lands."""
        if on:
            from textual.color import Color

            accent = Color.parse(self.app.get_css_variables().get("accent", "ansi_bright_blue"))
            self.styles.border = ("round", accent)
            return
        for edge in ("border_top", "border_right", "border_bottom", "border_left"):
            self.styles.clear_rule(edge)
        self.refresh(layout=True)


def _user_parser() -> MarkdownIt:
    """Markdown where a newline is a line break (as typed), not a space."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("gfm-like")
    parser.core.ruler.push("hard_breaks", _hard_breaks)
    return parser


def _hard_breaks(state: StateCore) -> None:
    for token in state.tokens:
        for child in token.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"
