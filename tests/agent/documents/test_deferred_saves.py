"""Edits waiting for the remote signer (agent/documents/deferred.py): kept on disk until signed, and a newer save
of the same document supersedes the kept one on disk too, so a later start never publishes the older text."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from didactyl_tui.agent.documents.deferred import DeferredSaves, UnsignedEdits
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.errors import SignerUnreachableError

ST = DocumentKey.SHORT_TERM


class _Codec:
    def to_text(self, value: Any) -> str:
        return str(value)


class _Store:
    """What DeferredSaves reads of the document store: the version held, the text shown, the codec."""

    keys = (ST,)

    def __init__(self) -> None:
        self.shown: list[str] = []

    def current_event(self, key: DocumentKey) -> None:
        return None

    def show_deferred(self, key: DocumentKey, text: str, value: Any) -> None:
        self.shown.append(text)

    def codec(self, key: DocumentKey) -> _Codec:
        return _Codec()



async def _deferred(path: Path, saved: list[tuple[str, str | None]]) -> DeferredSaves:
    async def save_now(key: DocumentKey, value: Any, base: str | None) -> None:
        raise SignerUnreachableError("the remote signer did not answer sign_event within 1s")

    tasks: set[asyncio.Task[Any]] = set()

    def spawn(coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        return task

    return DeferredSaves(_Store(), save_now, spawn, lambda line: saved.append((line, None)), 1.0,
                         UnsignedEdits(path), check=lambda key, text: text, sign_delay=lambda key: 0.0)


async def test_a_kept_edit_survives_a_restart_and_a_newer_save_supersedes_it_on_disk(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    warned: list[tuple[str, str | None]] = []
    first = await _deferred(db, warned)
    await first.wait_for_signer(ST, "Ada likes oolong", "base-id", SignerUnreachableError("signer away"))
    assert first.store.shown == ["Ada likes oolong"] and len(warned) == 1
    assert UnsignedEdits(db).all() == [(ST, "Ada likes oolong", "base-id")]

    again = await _deferred(db, warned)  # the next start: shown again, with the base it was written on
    await again.restore()
    assert again.store.shown == ["Ada likes oolong"] and again.pending[ST] == ("Ada likes oolong", "base-id")

    await again.discard(ST)  # the person saved a newer text (through the sync's one save path)
    assert UnsignedEdits(db).all() == [] and ST not in again
