"""What a chat leaves behind once it is gone (#34): nothing. The previous chat's widgets are freed when a new one
starts, and collected when the keyboard is quiet; the footer does not keep the keys it showed; the prompt
inspector holds the chat's own prompts, at most ``[llm] saved_assemblies`` of them. Real app (Pilot), gc to see
what is alive."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
from tui_support import make_app, make_config, screen_text, started, wait_for

from didactyl_tui.tui.widgets.message_entry import MessageEntry

SIZE = (130, 40)
pytestmark = pytest.mark.usefixtures("warm_litellm")  # dry runs count their prompt in the model helper


def chat(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(turns):
        out += [{"role": "user", "content": f"question {n}"},
                {"role": "assistant", "content": f"## Answer {n}\n\n- one\n- two\n\n`code` and *words* {n}"}]
    return out


def alive(refs: list[weakref.ref[Any]]) -> int:
    gc.collect()
    return sum(ref() is not None for ref in refs)


async def test_a_new_chat_frees_the_previous_one_and_collects_it_when_the_keyboard_is_quiet(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(publish_profile=False))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        await main.conversation.load_history(chat(6))
        await wait_for(pilot, lambda: "Answer 5" in screen_text(app), 10, "the chat on screen")
        refs = [weakref.ref(w) for w in main.conversation.query(MessageEntry)]
        assert len(refs) == 12
        full: list[float] = []

        def noted(phase: str, info: dict[str, int]) -> None:
            if phase == "stop" and info["generation"] == 2:
                full.append(1)

        threshold = gc.get_threshold()
        gc.set_threshold(threshold[0], threshold[1], 1 << 30)  # no full collection but the ones asked for
        gc.callbacks.append(noted)
        try:
            await main.action_new_chat()
            await wait_for(pilot, lambda: full, 10, "a full collection once the keyboard is quiet")
        finally:
            gc.callbacks.remove(noted)
            gc.set_threshold(*threshold)
        assert alive(refs) == 0, "the previous chat's entries are still held"


async def test_the_footer_keeps_none_of_the_keys_it_showed_before(tmp_path: Path) -> None:
    from textual.widgets._footer import FooterKey

    app = make_app(tmp_path, make_config(publish_profile=False))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        shown: list[weakref.ref[Any]] = []
        one_footer = len(main.query(FooterKey))
        for _ in range(8):  # each change of the bindings rebuilds the footer's keys
            keys = [weakref.ref(k) for k in main.query(FooterKey)]
            shown += keys
            main.refresh_bindings()
            await wait_for(pilot, lambda k=keys: not any(key() is not None and key().is_attached for key in k)
                           and main.query(FooterKey), 10, "the footer rebuilt")
        assert len(shown) >= 8 * one_footer > 0
        # Let go once the footer is left alone a moment (not at each rebuild: it costs ~0.7 ms a key); the keys of
        # the last rebuild may still be closing then: at most one footer's worth, not every key ever shown.
        await wait_for(pilot, lambda: alive(shown) <= one_footer, 10, lambda: f"{alive(shown)} keys still held")


async def test_the_inspector_holds_the_chats_last_prompts_only(tmp_path: Path) -> None:
    config = make_config(publish_profile=False)
    config.llm.saved_assemblies = 2
    app = make_app(tmp_path, config)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        for n in range(1, 4):
            await pilot.press("f5")  # a dry run: one more prompt in the inspector
            await wait_for(pilot, lambda n=n: main.inspector.entries and main.inspector.entries[-1].number == n, 20,
                           f"dry run {n}")
        assert [e.number for e in main.inspector.entries] == [2, 3]
        tree = main.inspector.assembly_tree
        assert [str(node.label).split(" ")[0] for node in tree.root.children] == ["#2", "#3"]
        await main.action_new_chat()
        assert main.inspector.entries == [] and not tree.root.children
        await pilot.press("f5")
        await wait_for(pilot, lambda: main.inspector.entries, 20, "the new chat's dry run")
        assert [e.number for e in main.inspector.entries] == [1]
