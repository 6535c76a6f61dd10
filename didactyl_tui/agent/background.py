"""One set of background tasks: started on the running loop, kept referenced, cancelled together at stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def settle(self, timeout: float) -> None:
        """Let what runs finish within ``timeout`` (e.g. publishes under way, each bounded by its own timeout)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def cancel(self, timeout: float) -> None:
        """Cancel every task and wait (at most ``timeout`` each) for them to end."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(timeout):
                    await task
