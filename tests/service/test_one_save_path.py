"""Exactly one function publishes a document (``DocumentSaves.save``): the ``memory_save`` tool, the editor, the CLI
and rollback all call it, each records the version in the history, and each handles a save refused because another
device's newer version is known the same way (nothing published, the text kept in the history with the same
note, the same error)."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import pytest
from agent_support import memory_event
from memory_support import text_of
from tui_support import TEST_KEY, make_app, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.agent.documents.history import REFUSED_NOTE
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.saving import DocumentSaves, Edit
from didactyl_tui.agent.documents.versions import NewerVersionKnown
from didactyl_tui.cli import run
from didactyl_tui.service.app import AppService
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen

ST = DocumentKey.SHORT_TERM
SIZE = (130, 40)


@pytest.fixture
def saves(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts that went through DocumentSaves.save (a spy that calls the real thing)."""
    seen: list[str] = []
    real = DocumentSaves.save

    async def spy(self: DocumentSaves, t: DocumentKey, edit: Edit, **kw):  # type: ignore[no-untyped-def]
        if isinstance(edit, str):
            seen.append(edit)
        return await real(self, t, edit, **kw)

    monkeypatch.setattr(DocumentSaves, "save", spy)
    return seen


def newer_elsewhere() -> object:
    """Another device's version, newer than anything this device will date its saves with."""
    return memory_event(TEST_KEY, "written on another device", int(time.time()) + 600)


async def history_notes(service: AppService) -> dict[str, str]:
    """text -> note, for this key's short-term versions."""
    return {v.content: v.note for v in await service.documents.history(ST)}


async def test_tool_and_rollback_take_the_one_path(tmp_path: Path, saves: list[str]) -> None:
    data = tmp_path / "data"
    async with AppService(make_config(), data_dir=data, env=make_env()) as svc:
        outcome = await svc.chat.dispatch_tool("memory_save", {"type": "short_term", "content": "by the tool"})
        assert not outcome.is_error, outcome.content
        first = svc.documents.snapshot(ST).event_id
        assert first is not None
        await svc.documents.save(ST, "a later edit")
        rolled = await svc.documents.rollback(ST, first)
        now = svc.documents.snapshot(ST)
        assert now.content == "by the tool" and rolled.event_id == now.event_id
        assert saves == ["by the tool", "a later edit", "by the tool"]
        notes = await history_notes(svc)
        assert {"by the tool", "a later edit"} <= set(notes)

        # Another device's newer version becomes known: every writer is refused the same way.
        await svc.parts.runtime.publisher.note_remote(newer_elsewhere())
        relay = svc.relays.embedded_url
        assert relay is not None
        refused = await svc.chat.dispatch_tool("memory_save", {"type": "short_term", "content": "tool, too late"})
        assert refused.is_error and "was not saved" in refused.content and "memory history" in refused.content
        later = next(v for v in await svc.documents.history(ST) if v.content == "a later edit")
        with pytest.raises(NewerVersionKnown, match=r"was not saved.*kept in the history"):
            await svc.documents.rollback(ST, later.event_id)
        assert saves[-2:] == ["tool, too late", "a later edit"]
        versions = await svc.documents.history(ST)
        refused_notes = [v.note for v in versions if v.origin == "local" and v.note == REFUSED_NOTE]
        assert len(refused_notes) == 2  # the tool's text and the rollback's new version, noted alike
        assert svc.documents.snapshot(ST).content == "by the tool"  # the cache kept what the relays have
        assert await relay_texts(svc) == ["by the tool"]  # nothing refused was published


async def test_the_editor_takes_the_one_path(tmp_path: Path, saves: list[str]) -> None:
    app = make_app(tmp_path / "data", make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("f6")
        editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
        editor.text_area.load_text("by the editor")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "accepted by 1/1 relays" in screen_text(app), 10, "the save")
        assert saves == ["by the editor"]
        service = app.service
        assert service is not None
        assert "by the editor" in await history_notes(service)

        await service.parts.runtime.publisher.note_remote(newer_elsewhere())
        editor.text_area.load_text("editor, too late")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "Not saved" in screen_text(app), 10, "the refusal")
        assert "was not saved" in " ".join(screen_text(app).split())
        assert editor.text_area.text == "editor, too late"  # the words stay in the editor
        assert saves == ["by the editor", "editor, too late"]
        assert (await history_notes(service))["editor, too late"] == REFUSED_NOTE
        assert await relay_texts(service) == ["by the editor"]


async def relay_texts(service: AppService) -> list[str]:
    """The short-term texts the service's embedded relay holds (asked by a client of its own, not the app's)."""
    from didactyl_tui.nostr.pool import RelayPool

    async with RelayPool([service.relays.embedded_url]) as pool:
        events = await pool.query([{"authors": [TEST_KEY.public_key_hex], "kinds": [30078],
                                    "#d": ["short_term_memory"]}], timeout=5)
    return [text_of(ev, TEST_KEY) for ev in events]


def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(args), env=env, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


async def test_the_cli_takes_the_one_path(tmp_path: Path, saves: list[str]) -> None:
    data = tmp_path / "data"
    config = tmp_path / "config.toml"
    config.write_text("[relays]\nembedded_port = 0\ntimeout_s = 2.0\n[agent]\npublish_profile = false\n")
    env = make_env(DIDACTYL_DATA_DIR=str(data), DIDACTYL_CONFIG=str(config))
    code, _, err = await asyncio.to_thread(cli, env, "memory", "save", "--type", "short_term", "--content",
                                           "by the CLI")
    assert code == 0, err
    assert saves == ["by the CLI"]
    # Bad input is refused by the one path's own check (exit 2), not by a second one in the CLI.
    code, _, err = await asyncio.to_thread(cli, env, "memory", "save", "--type", "short_term", "--content",
                                           "x" * 9000)
    assert code == 2 and "limit is 8,000" in err and saves[-1] == "x" * 9000

    # This device learns of another device's newer version (kept in its outbox across runs).
    async with AppService(make_config(), data_dir=data, env=env) as svc:
        await svc.parts.runtime.publisher.note_remote(newer_elsewhere())
    code, _, err = await asyncio.to_thread(cli, env, "memory", "save", "--type", "short_term", "--content",
                                           "CLI, too late")
    assert code == 1 and "was not saved" in err and "memory history" in err, err
    assert saves[-1] == "CLI, too late"
    async with AppService(make_config(), data_dir=data, env=env) as svc:
        notes = await history_notes(svc)
        assert notes["CLI, too late"] == REFUSED_NOTE and notes["by the CLI"] == ""


async def test_partial_edits_take_the_one_path(tmp_path: Path) -> None:
    async with AppService(make_config(), data_dir=tmp_path / "data", env=make_env()) as svc:
        await svc.chat.dispatch_tool("memory_save", {"type": "short_term", "content": "tea"})
        added = await svc.chat.dispatch_tool("memory_insert", {"type": "short_term", "new_str": "go"})
        assert not added.is_error, added.content
        assert svc.documents.snapshot(ST).content == "tea\ngo"
        assert {"tea", "tea\ngo"} <= set(await history_notes(svc))  # each change kept in the history

        # Another device's newer version becomes known: the change is refused as a whole save is.
        await svc.parts.runtime.publisher.note_remote(newer_elsewhere())
        refused = await svc.chat.dispatch_tool("memory_replace", {"type": "short_term", "old_str": "go",
                                                                  "new_str": "chess"})
        assert refused.is_error and "was not saved" in refused.content and "memory history" in refused.content
        assert (await history_notes(svc))["tea\nchess"] == REFUSED_NOTE
        assert svc.documents.snapshot(ST).content == "tea\ngo"
        assert await relay_texts(svc) == ["tea\ngo"]
