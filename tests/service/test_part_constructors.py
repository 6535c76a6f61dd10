"""Every part of the service names what it uses in its constructor: none takes the whole runtime (issue #33 item 4).
Only ``Parts.runtime`` itself (held for AppService's start and stop) is the runtime."""

from __future__ import annotations

import dataclasses
import types
import typing

from didactyl_tui.service.attached_chat import AttachedChat
from didactyl_tui.service.chat import ChatService
from didactyl_tui.service.parts import Parts
from didactyl_tui.service.runtime import Runtime


def _classes(hint: object) -> list[type]:
    """The classes an annotation names (``X | None`` names X)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return [c for arg in typing.get_args(hint) for c in _classes(arg)]
    return [hint] if isinstance(hint, type) and hint is not type(None) else []


def _mentions(hint: object, cls: type) -> bool:
    return hint is cls or any(_mentions(arg, cls) for arg in typing.get_args(hint))


def test_no_part_takes_the_runtime() -> None:
    hints = typing.get_type_hints(Parts)
    parts = {c for f in dataclasses.fields(Parts) if f.name != "runtime" for c in _classes(hints[f.name])}
    parts |= {ChatService, AttachedChat}  # ``chat`` is annotated with the interface both implement
    assert len(parts) >= 10, parts
    takers = {cls.__name__: name for cls in parts
              for name, hint in typing.get_type_hints(cls.__init__).items() if _mentions(hint, Runtime)}
    assert takers == {}
