"""What a relay client keeps to defend itself against a hostile relay (issue #10).

* :class:`RecentKeys` — a bounded set; :class:`RecentIds` (a subscription's repeats) and
  :class:`FailedEvents` are two of them.
* :class:`FailedEvents` — a bounded set of events whose signature failed, keyed by ``(id, sig)``:
  the same bad event is verified once, however often it comes back. Keying on the pair (not the id)
  means a forgery that borrows a genuine event's id cannot get the genuine event dropped: the
  genuine event's signature is valid, so it is never the stored pair. Safe to share between relays.
* :class:`TokenBucket` — signature checks per second per relay. Checks may run into debt; the
  client then stops reading that relay until the debt is paid (back-pressure on its socket instead
  of dropping events).
* :class:`FrameHealth` — the share of invalid frames among a relay's recent frames, by reason; the
  client disconnects (and backs off) a relay whose frames are mostly invalid.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")


class RecentKeys(Generic[K]):
    """A bounded set: past ``capacity`` the least recently added key is forgotten."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._keys: OrderedDict[K, None] = OrderedDict()
        self.capacity = capacity

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def add(self, key: K) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        if len(self._keys) > self.capacity:
            self._keys.popitem(last=False)


class RecentIds(RecentKeys[str]):
    """Recently seen event ids (a subscription's repeats)."""


class FailedEvents(RecentKeys[tuple[str, str]]):
    """``(id, sig)`` pairs whose signature did not verify."""


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; :meth:`take` may go into debt."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        if not (0 < rate < float("inf")) or not burst >= 1:
            raise ValueError("a rate must be a finite number > 0 and its burst at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self, n: float = 1.0) -> None:
        self._refill()
        self._tokens -= n

    def wait_time(self) -> float:
        """Seconds until the bucket is out of debt (0 when it is not in debt)."""
        self._refill()
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class FrameHealth:
    """The last ``window`` judged frames of one connection: valid, or invalid with a reason."""

    def __init__(self, window: int, max_invalid_share: float) -> None:
        if window < 1 or not 0 < max_invalid_share < 1:
            raise ValueError("window must be >= 1 and max_invalid_share in (0, 1)")
        self.window = window
        self.max_invalid_share = max_invalid_share
        self._recent: deque[str | None] = deque(maxlen=window)
        self.invalid: Counter[str] = Counter()  # reasons among the frames in the window

    def reset(self) -> None:
        self._recent.clear()
        self.invalid.clear()

    def note(self, reason: str | None) -> None:
        """One frame: ``None`` when valid, else why it was invalid."""
        if len(self._recent) == self.window:
            gone = self._recent[0]
            if gone is not None:
                self.invalid[gone] -= 1
                if not self.invalid[gone]:
                    del self.invalid[gone]
        self._recent.append(reason)
        if reason is not None:
            self.invalid[reason] += 1

    def failing(self) -> str | None:
        """The main reason when the window is full and mostly invalid, else None."""
        if len(self._recent) < self.window:
            return None
        bad = sum(self.invalid.values())
        if bad <= self.max_invalid_share * self.window:
            return None
        return self.invalid.most_common(1)[0][0]
