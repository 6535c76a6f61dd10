"""When a new version of a document may be dated: after every version known (so it supersedes them, NIP-01), never
more than ``sign_ahead_max_s`` ahead of this device's clock. A burst of saves waits briefly for the clock; a
version dated further ahead than a burst explains (another device's fast clock) makes the save fail with
:class:`~.versions.DatedAheadError`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .keys import DocumentKey
from .versions import DatedAheadError

SIGN_AHEAD_MAX_S = 5  # we never sign a version dated more than this ahead of our clock
BURST_WAIT_MAX_S = 2.0  # a save waits at most this long for the clock to allow its date (a burst)


class VersionDating:
    def __init__(self, clock: Callable[[], float], sign_ahead_max_s: float = SIGN_AHEAD_MAX_S) -> None:
        self._clock = clock
        self.sign_ahead_max_s = float(sign_ahead_max_s)

    def delay(self, floor: int) -> float:
        """Seconds until a version can be dated after ``floor`` (the newest date known) without being dated more
        than ``sign_ahead_max_s`` ahead of the clock (0: now)."""
        return max(0.0, (floor + 1) - (self._clock() + self.sign_ahead_max_s))

    def created_at(self, floor: int) -> int:
        return max(int(self._clock()), floor + 1)

    async def wait(self, key: DocumentKey, floor: Callable[[], int]) -> None:
        """(Under the document's save lock.) Wait, briefly, until the clock allows the next version's date; a
        version dated further ahead than a burst can explain is refused."""
        for _ in range(int(BURST_WAIT_MAX_S * 4) + 2):  # bounded whatever the clock does
            delay = self.delay(floor())
            if delay <= 0:
                return
            if delay > BURST_WAIT_MAX_S:
                break
            await asyncio.sleep(min(delay, 0.25))
        ahead = floor() - int(self._clock())
        raise DatedAheadError(
            f"the newest {key.title.lower()} version is dated {ahead} s ahead of this device's clock; a save now "
            f"would have to be dated {ahead + 1} s ahead, more than the {self.sign_ahead_max_s:g} s allowed (is a "
            "clock wrong?)", key.title)
