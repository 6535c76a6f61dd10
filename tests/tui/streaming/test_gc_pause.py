"""Full collections paused while a reply streams, resumed once the keyboard is quiet (tui/streaming/gc_pause.py)."""

from __future__ import annotations

import asyncio
import gc

from didactyl_tui.tui.streaming import gc_pause, typing_clock


def test_pause_nests_and_resumes_only_when_typing_stops(monkeypatch) -> None:
    monkeypatch.setattr(gc_pause, "RESUME_IDLE_S", 2.0)  # wide enough that a loaded machine's delays never reach it

    async def run() -> None:
        before = gc.get_threshold()
        with gc_pause.full_collections_paused():
            assert gc.get_threshold() == (before[0], before[1], gc_pause.NEVER)  # young generations still run
            with gc_pause.full_collections_paused():
                pass
            assert gc.get_threshold()[2] == gc_pause.NEVER  # the inner end does not resume
        for _ in range(10):  # typing goes on after the turn: still paused
            typing_clock.note_input()
            await asyncio.sleep(gc_pause.CHECK_S / 2)
            assert gc_pause.paused()
        deadline = asyncio.get_running_loop().time() + 30
        while gc_pause.paused() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(gc_pause.CHECK_S)
        assert not gc_pause.paused()  # typing stopped: resumed
        assert gc.get_threshold() == before

    asyncio.run(run())


def test_resume_is_bounded_while_typing_goes_on() -> None:
    async def run() -> None:
        before = gc.get_threshold()
        started = asyncio.get_running_loop().time()
        with gc_pause.full_collections_paused():
            pass
        while gc_pause.paused() and asyncio.get_running_loop().time() - started < 3 * gc_pause.RESUME_MAX_S:
            typing_clock.note_input()  # someone types without a pause
            await asyncio.sleep(gc_pause.CHECK_S / 2)
        assert not gc_pause.paused()
        assert gc_pause.RESUME_MAX_S <= asyncio.get_running_loop().time() - started
        assert gc.get_threshold() == before

    asyncio.run(run())


def test_a_new_pause_before_the_resume_keeps_collections_paused() -> None:
    async def run() -> None:
        before = gc.get_threshold()
        with gc_pause.full_collections_paused():
            pass
        with gc_pause.full_collections_paused():  # the next turn starts before the keyboard was quiet
            await asyncio.sleep(gc_pause.CHECK_S * 3)
            assert gc.get_threshold()[2] == gc_pause.NEVER
        deadline = asyncio.get_running_loop().time() + 30
        while gc_pause.paused() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(gc_pause.CHECK_S)
        assert gc.get_threshold() == before

    asyncio.run(run())


def test_a_loop_that_ends_before_the_resume_leaves_it_to_resume_now() -> None:
    # The app stops right after a turn (its on_unmount calls resume_now(collect=False)): the collector must not
    # stay without full collections for whatever runs next in the process.
    before = gc.get_threshold()

    async def turn_then_stop() -> None:
        with gc_pause.full_collections_paused():
            pass

    asyncio.run(turn_then_stop())
    assert gc_pause.paused() and gc.get_threshold()[2] == gc_pause.NEVER
    gc_pause.resume_now(collect=False)
    assert not gc_pause.paused() and gc.get_threshold() == before
