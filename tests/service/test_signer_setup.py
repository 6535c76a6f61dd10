"""The signer setup's work runs on a thread of its own (service/signer_setup.run_off_loop): cancelling the caller
stops it, however often the caller is cancelled while it stops."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from didactyl_tui.service.signer_setup import run_off_loop


async def test_a_second_cancel_while_stopping_still_stops_the_work() -> None:
    running, stopped = threading.Event(), threading.Event()

    async def work() -> None:  # waits for a phone that never answers
        running.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()

    caller = asyncio.create_task(run_off_loop(work))
    assert await asyncio.to_thread(running.wait, 10)
    caller.cancel()
    await asyncio.sleep(0)  # the caller begins to stop the work ...
    caller.cancel()  # ... and is cancelled again meanwhile (its dialog closed)
    with contextlib.suppress(asyncio.CancelledError):
        await caller
    assert await asyncio.to_thread(stopped.wait, 10), "the work went on after its caller was cancelled"

