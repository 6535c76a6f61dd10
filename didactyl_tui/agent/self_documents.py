"""The agent's self-documents beside its two memories: the soul (kind 31120, ``d = soul``) and the task list
(kind 30078, ``d = tasks``). Each is versioned like memory: a version names its base (``["prev", id]``), every
version seen is kept in the memory history, and a newer version edited from an older one is a concurrent edit
(:func:`~.memory.lineage.lost_local_edit`). Pure: names, kinds and the text each version shows as."""

from __future__ import annotations

from enum import Enum
from typing import Any

from ..nostr.kinds import APP_DATA, SOUL
from .soul_event import MAX_SOUL_BYTES, SOUL_D_TAG
from .tasks import MAX_TASKS_BYTES, TASKS_D_TAG


class SelfDocument(str, Enum):
    SOUL = "soul"
    TASKS = "tasks"

    @property
    def d_tag(self) -> str:
        return SOUL_D_TAG if self is SelfDocument.SOUL else TASKS_D_TAG

    @property
    def kind(self) -> int:
        return SOUL if self is SelfDocument.SOUL else APP_DATA

    @property
    def title(self) -> str:
        return "Soul" if self is SelfDocument.SOUL else "Task list"

    @property
    def limit_chars(self) -> int:
        """The editor's gauge: the stored form's byte bound (a character is at least a byte)."""
        return MAX_SOUL_BYTES if self is SelfDocument.SOUL else MAX_TASKS_BYTES

    @classmethod
    def find(cls, value: Any) -> SelfDocument | None:
        """``"soul"``/``"tasks"`` → the document; None for anything else (a memory type, say)."""
        if isinstance(value, SelfDocument):
            return value
        for doc in cls:
            if value == doc.value:
                return doc
        return None
