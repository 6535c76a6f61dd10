"""Gift wraps for the admin while attached, judged by who sealed them: the agent's and the admin's own are opened,
anyone else's is dropped after its outer layer (this window shows only the admin's conversation with the agent).

A gift wrap's outer key is a one-time key, so who sent it is known only once its outer layer is decrypted and the
seal inside checked (its author and signature, :func:`~didactyl_tui.nostr.nip59.unwrap_seal`). That is the work
every wrap costs, and it is bounded: one NIP-44 decrypt of at most 64 KiB with the one-time key, two signature
checks. Only wraps sealed by the agent or the admin are opened further, the agent's first; a stranger's wrap costs
nothing more and never takes the place of one of theirs.

- :class:`WrapIntake` holds the wraps waiting to be judged, bounded in count and bytes. Full, it refuses a new wrap
  and counts it (whose it is cannot be known yet); the link then reads the relays again once the intake has drained
  (attach_link.py), so a refused wrap of the agent's comes late, never not at all.
- :class:`LocalWrapOpener` judges and opens a batch with the key in hand on a worker thread (one hop per batch);
  :class:`SignerWrapOpener` does it through a :class:`~didactyl_tui.nostr.signer.Signer` (a NIP-46 signer: a round
  trip per layer, a few at a time).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import DidactylError
from ..nostr.event import Event
from ..nostr.keys import SecretKey
from ..nostr.nip59 import Rumor, UnwrapError, open_seal, open_seal_with, unwrap_seal, unwrap_seal_with
from ..nostr.signer import Signer

SIGNER_CONCURRENCY = 8  # requests in flight to a remote signer at once


@dataclass(slots=True)
class Judged:
    """What a batch of wraps held."""

    rumors: list[Rumor] = field(default_factory=list)  # opened: the agent's first, then the admin's, each in order
    strangers: int = 0  # sealed by anyone else: dropped after the outer layer
    unreadable: list[str] = field(default_factory=list)  # why each wrap that failed a check failed
    not_judged: list[Event] = field(default_factory=list)  # the signer failed (the wrap may be fine: try later)
    signer_error: str = ""


class WrapOpener(Protocol):
    async def judge(self, wraps: Sequence[Event]) -> Judged:
        """Judge ``wraps`` by their seals' authors and open the agent's and the admin's."""
        ...


def _ours_first(pairs: list[tuple[Event, Event]], agent: str) -> list[tuple[Event, Event]]:
    return sorted(pairs, key=lambda pair: pair[1].pubkey != agent)  # stable: the agent's first, arrival order kept


class LocalWrapOpener:
    """The admin's key in this process: a batch is judged and opened in one worker-thread hop."""

    def __init__(self, key: SecretKey, agent: str) -> None:
        self._key, self._agent = key, agent

    async def judge(self, wraps: Sequence[Event]) -> Judged:
        return await asyncio.to_thread(self._judge_now, list(wraps))

    def _judge_now(self, wraps: list[Event]) -> Judged:
        judged, members = Judged(), (self._agent, self._key.public_key_hex)
        ours: list[tuple[Event, Event]] = []
        for wrap in wraps:
            try:
                seal = unwrap_seal(wrap, self._key)
            except UnwrapError as exc:
                judged.unreadable.append(exc.message)
                continue
            if seal.pubkey in members:
                ours.append((wrap, seal))
            else:
                judged.strangers += 1
        for wrap, seal in _ours_first(ours, self._agent):
            try:
                judged.rumors.append(open_seal(wrap, seal, self._key).rumor)
            except UnwrapError as exc:
                judged.unreadable.append(exc.message)
        return judged


class SignerWrapOpener:
    """The admin's key behind a :class:`Signer` (a remote signer: every layer a round trip, a few at a time)."""

    def __init__(self, signer: Signer, agent: str, *, concurrency: int = SIGNER_CONCURRENCY) -> None:
        self._signer, self._agent = signer, agent
        self._slots = asyncio.Semaphore(concurrency)

    async def judge(self, wraps: Sequence[Event]) -> Judged:
        judged, members = Judged(), (self._agent, self._signer.public_key)

        async def seal_of(wrap: Event) -> Event | None:
            try:
                async with self._slots:
                    return await unwrap_seal_with(wrap, self._signer)
            except UnwrapError as exc:
                judged.unreadable.append(exc.message)
            except DidactylError as exc:
                judged.not_judged.append(wrap)
                judged.signer_error = exc.message
            return None

        seals = await asyncio.gather(*(seal_of(wrap) for wrap in wraps))
        ours: list[tuple[Event, Event]] = []
        for wrap, seal in zip(wraps, seals, strict=True):
            if seal is None:
                continue
            if seal.pubkey in members:
                ours.append((wrap, seal))
            else:
                judged.strangers += 1

        async def rumor_of(wrap: Event, seal: Event) -> Rumor | None:
            try:
                async with self._slots:
                    return (await open_seal_with(wrap, seal, self._signer)).rumor
            except UnwrapError as exc:
                judged.unreadable.append(exc.message)
            except DidactylError as exc:
                judged.not_judged.append(wrap)
                judged.signer_error = exc.message
            return None

        rumors = await asyncio.gather(*(rumor_of(wrap, seal) for wrap, seal in _ours_first(ours, self._agent)))
        judged.rumors = [rumor for rumor in rumors if rumor is not None]
        return judged


def wrap_opener(admin: Signer, agent: str, key: SecretKey | None) -> WrapOpener:
    """The fast opener when the admin's key is in hand (``key``), else one through ``admin``."""
    return LocalWrapOpener(key, agent) if key is not None else SignerWrapOpener(admin, agent)


class WrapIntake:
    """Wraps waiting to be judged, oldest first: at most ``max_wraps`` and ``max_bytes`` (``Event.approx_bytes``)."""

    def __init__(self, max_wraps: int, max_bytes: int) -> None:
        self.max_wraps, self.max_bytes = max_wraps, max_bytes
        self._waiting: deque[Event] = deque()
        self._bytes = 0
        self._arrived = asyncio.Event()
        self._idle = asyncio.Event()  # nothing waiting, and the last batch taken has been handled
        self._idle.set()
        self.refused = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def offer(self, wrap: Event) -> bool:
        """Keep ``wrap`` to be judged; False (counted in ``refused``) when there is no room."""
        size = wrap.approx_bytes()
        if len(self._waiting) >= self.max_wraps or self._bytes + size > self.max_bytes:
            self.refused += 1
            return False
        self._waiting.append(wrap)
        self._bytes += size
        self._idle.clear()
        self._arrived.set()
        return True

    async def take(self, most: int) -> list[Event]:
        """The oldest waiting wraps, at most ``most`` (waits for one); call :meth:`handled` once they are."""
        while not self._waiting:
            self._arrived.clear()
            await self._arrived.wait()
        batch = [self._waiting.popleft() for _ in range(min(most, len(self._waiting)))]
        self._bytes -= sum(wrap.approx_bytes() for wrap in batch)
        return batch

    def handled(self) -> None:
        if not self._waiting:
            self._idle.set()

    async def drained(self) -> None:
        """Wait until nothing is waiting and every batch taken has been handled."""
        await self._idle.wait()
