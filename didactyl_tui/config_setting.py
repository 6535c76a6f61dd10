"""A documented config field (the one helper every config section is written with)."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def setting(default: Any, doc: str, **kw: Any) -> Any:
    """A documented config field: its default, its ``doc`` (the documentation users read) and its bounds
    (``min``, ``max``, ``choices``...)."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc, **kw})
    return field(default=default, metadata={"doc": doc, **kw})
