"""The fast path's body of a message: one paint throttle, finished blocks handed over whole, a plain-text tail.

A streaming reply's text grows with :meth:`FastBody.feed` and is painted by one throttle: each paint hands the
new finished blocks to a :class:`MessagePart` (``append_blocks``: only the new text is parsed, no frame is held)
and shows the unfinished last block as plain text (:class:`LiveTail`), then waits until the frame is composed
and measures what the paint cost. The next paint waits long enough for painting to take at most ``PAINT_SHARE``
of the time (and at least ``MIN_PAINT_GAP_S``), so a long reply paints less often instead of starving the
keyboard and the model stream of the event loop.

A long reply streams into a column of parts: past ``PART_BLOCKS`` blocks the live part hands its growing last
block to a fresh part and is never touched again, so an append costs the same at the end of a 10,000-token
reply as at its start; parts far from the viewport are folded (``widgets/fold.py``), at the start of a paint
while the view follows the reply. A paint's steps land in one layout pass (``_steps_held``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from textual.timer import Timer
    from textual.widget import Widget
    from textual.widgets import Markdown

    from .live_tail import LiveTail
    from .reply import ReplyHost

PAINT_DEFER_S = 0.005  # a paint due while keys wait is put off by this much
MAX_PAINT_DEFERRALS = 6  # at most this many times in a row
MIN_PAINT_GAP_S = 0.04  # at most ~25 paints a second
MAX_PAINT_GAP_S = 0.25  # and at least 4 (a slow first paint, e.g. markdown-it's import, must not stall the rest)
# While someone types (typing_clock.typing_now), at most ~8 paints a second: each paint's layout pass holds
# the keys that arrive during it, so fewer passes let more keys echo at once (the reply still moves ~8 times a second).
TYPING_PAINT_GAP_S = 0.12
PAINT_SHARE = 0.5  # while streaming, painting may take this share of the time; the rest is for keys and input
# Text handed to the Markdown per paint. Textual holds every frame while an append mounts its new blocks, so an
# unbounded catch-up paint after a burst would freeze the screen (and the echo of keys) for its whole length.
MAX_PAINT_CHARS = 2_000
PART_BLOCKS = 6  # a streaming reply's live Markdown hands over to a new part beyond this many blocks
FINISH_PAINT_CHARS = 8_000  # what is left when a reply ends, in one paint when no key waits (~40 ms of mounting)


class FastBody:
    """The Markdown part(s) of one message and, while it streams, its painter (see the module's docstring)."""

    def __init__(self, host: ReplyHost, *, streaming: bool, parser_factory: Callable[[], MarkdownIt] | None) -> None:
        self.host = host
        self._parser_factory = parser_factory
        self._painted = 0 if streaming else len(host.text)  # characters on screen (the Markdown's and the tail's)
        self._handed = self._painted  # characters given to the Markdown (the rest of the painted text is the tail)
        self._timer: Timer | None = None
        self._paint_lock = asyncio.Lock()
        self._waiting_for_frame = False
        self._next_paint_at = 0.0
        self._deferred = 0  # paints put off in a row because input was waiting
        self._frozen: list[str] = []  # the source of each finished part (all but the live, last one)
        self._live: Markdown | None = None
        self._tail: LiveTail | None = None  # a streamed reply's unfinished last block, as plain text
        self._streaming = streaming

    @property
    def painted(self) -> int:
        return self._painted

    def compose(self) -> Iterator[Widget]:
        from .message_part import MessagePart  # markdown-it is not needed for the first (empty) frame

        self._live = MessagePart("" if self._streaming else self.host.text, classes="message-body",
                                 parser_factory=self._parser_factory)
        yield self._live
        if self._streaming:
            from .live_tail import LiveTail

            self._tail = LiveTail()
            yield self._tail

    @property
    def markdown(self) -> Markdown:
        assert self._live is not None, "not composed yet"
        return self._live

    def finished_parts(self) -> list[Widget]:
        from textual.widgets import Markdown

        return [child for child in self.host.children if isinstance(child, Markdown) and child is not self._live]

    def part_sources(self) -> list[str]:
        return [*self._frozen, self.markdown.source]

    async def feed(self) -> None:
        """The host's text grew: paint it when the throttle says (returns at once, never waits for a paint)."""
        self._schedule_paint()

    def _schedule_paint(self) -> None:
        if self._timer is not None or self._waiting_for_frame or self._paint_lock.locked():
            return  # a paint is due or running; it takes everything that arrived meanwhile
        # Never a zero delay: Textual's timer divides by its interval when it runs late, and dies silently.
        self._timer = self.host.set_timer(max(0.001, self._next_paint_at - time.monotonic()), self._paint)

    async def _paint(self) -> None:
        self._timer = None
        if self._input_waiting() and self._deferred < MAX_PAINT_DEFERRALS:
            # Keys first: the app has input queued; paint right after it (a few times at most, never starved).
            self._deferred += 1
            self._timer = self.host.set_timer(PAINT_DEFER_S, self._paint)
            return
        self._deferred = 0
        started = time.thread_time()
        painted = await self._append_unpainted()
        if painted:
            # The cost is this thread's CPU time from the append to the composed frame (parse, mount, layout,
            # render, and the model stream's chunks read meanwhile on this loop): painting backs off as it gets
            # expensive, so the stream and the keys keep most of the loop.
            self._waiting_for_frame = True
            self.host.call_after_refresh(self._frame_composed, started)

    async def _keys_through(self) -> None:
        await asyncio.sleep(0)
        for _ in range(MAX_PAINT_DEFERRALS):
            if not self._input_waiting():
                return
            await asyncio.sleep(PAINT_DEFER_S)

    def _input_waiting(self) -> bool:
        """A key is on its way to the screen: queued in the app, queued at the focused widget, or handled with
        its echo not painted yet. A paint holds every frame while it mounts, so it goes after the echo."""
        from .one_layout import echo_pending

        return echo_pending(self.host.screen, self.host.parent)

    async def _append_unpainted(self, most: int = MAX_PAINT_CHARS) -> bool:
        """Paint at most ``most`` characters more: finished blocks go to the Markdown, the unfinished last
        block to the plain tail (all of it to the Markdown once the reply has ended)."""
        text = self.host.text
        async with self._paint_lock:
            with self._steps_held():
                return await self._append_locked(text, most)

    def _steps_held(self) -> AbstractContextManager[object]:
        """A paint's steps (its blocks mounted one by one, a part handed over, the tail, the parts folded) each
        asked for a layout pass of their own: ~3 passes a paint, each as costly as the screen is large. The
        screen's hooks hold the pass until the steps are done (one pass a paint), and paint a key's echo
        meanwhile (``screen_hooks.paint_steps``); a screen without them runs its passes as Textual does."""
        paint_steps = getattr(self.host.screen, "paint_steps", None) if self.host.is_attached else None
        return paint_steps() if paint_steps is not None else nullcontext()

    async def _append_locked(self, text: str, most: int) -> bool:
        fold_far_parts = getattr(self.host.parent, "fold_streaming_parts", None)  # the conversation's
        if self._streaming and fold_far_parts is not None:
            fold_far_parts(self.host)
        end = min(len(text), self._painted + most)
        # A streamed reply's whole blocks go to the Markdown as such; so does its rest once it has ended.
        whole = self._tail is not None and not self._streaming and self._handed + most >= len(text)
        if self._streaming and self._tail is not None:
            from .live_tail import finished_length

            cut = self._handed + finished_length(text[self._handed:min(end, self._handed + most)])
        else:
            cut = min(end, self._handed + most)
        if end <= self._painted and cut <= self._handed:
            return False
        self._painted = max(self._painted, end)
        if cut > self._handed:
            markdown = self.markdown
            new = text[self._handed:cut]
            if self._tail is not None and (self._streaming or whole):
                await markdown.append_blocks(new)  # type: ignore[attr-defined]  # whole blocks: none re-parsed
            else:
                await markdown.append(new)
            self._handed = cut
            if self._streaming and len(markdown.children) > PART_BLOCKS and self.host.is_attached:
                await self._start_next_part(markdown)
        if self._tail is not None:
            self._tail.show(text[self._handed:self._painted])
            if not self._streaming and self._handed >= len(text):
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

        host = self.host
        part = MessagePart("", classes="message-body")
        with host.app.batch_update():
            await last.remove()
            await host.mount(part, before=self._tail if self._tail is not None and self._tail.parent else None)
            await part.append_blocks("".join(lines[cut:]))
        self._frozen.append("".join(lines[:cut]))
        self._live = part
        self._join_parts(part)  # the part handed over folds at a later paint, once it lies far enough

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
        from .typing_clock import typing_now

        if typing_now():
            gap = max(gap, TYPING_PAINT_GAP_S)
        self._next_paint_at = time.monotonic() + gap
        if self._streaming and self._painted < len(self.host.text):
            self._schedule_paint()

    async def finish(self) -> None:
        """The reply ended (its whole text is the host's now): paint what is left, letting typed keys through
        between bounded paints."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._streaming = False
        # What the throttle had not painted yet goes in one paint when nobody is typing (the reply's end reaches the
        # screen sooner: most replies are short), else in bounded paints with the keys echoed between them.
        from .typing_clock import typing_now

        most = MAX_PAINT_CHARS if typing_now() else FINISH_PAINT_CHARS
        while await self._append_unpainted(most):
            await self._keys_through()
            most = MAX_PAINT_CHARS
