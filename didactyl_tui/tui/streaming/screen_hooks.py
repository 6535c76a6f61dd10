"""The fast path's hooks in the screen that shows the conversation: one layout pass per paint while a reply
streams, and a key's echo before a due layout pass (``one_layout.py``); the compositor's full map kept while a reply
streams (``full_map.py``).

They override three of Textual's private ``Screen`` methods (``_refresh_layout``, ``_on_timer_update``,
``_screen_resized``, as of Textual 8.2), so this class is only used on a Textual in the tested range
(``textual_range.py``); elsewhere the screen gets :class:`PublicScreenHooks`, which overrides nothing. Arguments are
passed through whole, so a changed signature on an untested version could not break them even if they were used
there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from textual.css.query import NoMatches

from .reply import ReplyPath

MAX_ECHO_TURNS = 3  # a layout pass is put off for keys at most this many updates in a row


class PublicScreenHooks:
    """Nothing: Textual's own update and layout (the public path, and any untested Textual)."""


class FastScreenHooks:
    """A mixin placed before ``Screen`` in the bases of a screen with a ``conversation`` property (the column
    the replies stream into, whose ``reply_path`` says which path it uses) and a ``streaming`` flag."""

    __echo_turns = 0  # updates in a row that put the layout pass off for a key (ours: name-mangled)
    __paint_steps = 0  # paints of a streaming reply whose steps are running (see paint_steps)

    @contextmanager
    def paint_steps(self) -> Iterator[None]:
        """Around a streaming paint's steps (blocks mounted, a part handed over, the tail): the layout pass they
        ask for waits until they are all done, so a paint costs one pass; meanwhile an update paints only what
        lies outside the conversation (a key's echo, the status bar), as ``one_layout.echo_only`` says."""
        self.__paint_steps += 1
        try:
            yield
        finally:
            self.__paint_steps -= 1
            screen: Any = self
            screen.check_idle()  # the pass that waited: at the next update

    def _refresh_layout(self, *args: Any, **kwargs: Any) -> Any:
        parent: Any = super()
        screen: Any = self
        if not screen.streaming or screen.conversation.reply_path is not ReplyPath.FAST:
            return parent._refresh_layout(*args, **kwargs)
        from .one_layout import layout_once

        layout_once(screen, lambda: parent._refresh_layout(*args, **kwargs))
        return None

    def _screen_resized(self, *args: Any, **kwargs: Any) -> Any:
        """A Resize to the size the screen is laid out at already lays nothing out: at start the screen gets three
        (the app's first size, its idle check, the screen's own first pass), each a full pass over the same size —
        with a resumed chat's entries on screen, ~50 ms before `didactyl --continue`'s first frame (#34). A layout
        a widget asked for meanwhile still runs at the next update."""
        parent: Any = super()
        screen: Any = self
        size = args[0] if args else kwargs.get("size")
        laid_out = getattr(getattr(screen, "_compositor", None), "size", None)
        if size is not None and size == laid_out and screen.is_attached:
            return None
        return parent._screen_resized(*args, **kwargs)

    def _on_timer_update(self, *args: Any, **kwargs: Any) -> Any:
        parent: Any = super()
        # Always, not only while streaming: the passes right after a reply ends (its last blocks, the parts
        # unfolding) cost 40-90 ms, and keys typed as it ends waited for them.
        screen: Any = self
        try:
            conversation = screen.conversation
        except NoMatches:  # an update before the screen has composed its children: nothing to echo yet
            return parent._on_timer_update(*args, **kwargs)
        if self.__paint_steps and screen.streaming and conversation.reply_path is ReplyPath.FAST:
            from .one_layout import echo_only

            if echo_only(screen, conversation):
                return None
        if self.__echo_turns < MAX_ECHO_TURNS and conversation.reply_path is ReplyPath.FAST:
            from .one_layout import keys_before_layout

            if keys_before_layout(screen, conversation):
                self.__echo_turns += 1
                return None
        self.__echo_turns = 0
        if not screen.streaming or conversation.reply_path is not ReplyPath.FAST:
            return parent._on_timer_update(*args, **kwargs)
        from .full_map import kept

        with kept(getattr(screen, "_compositor", None)):  # the map is not arranged again for each repaint
            return parent._on_timer_update(*args, **kwargs)
