"""The agent's memories as the views use them: snapshots, THE save path (``MemorySync.save``, shared with
the ``memory_save`` tool), rollback, history, relay status and the outbox. SQLite work runs off the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..agent.memory.outbox import OutboxEntry
from ..agent.memory.publisher import RelayHolding
from ..agent.memory.store import MemorySnapshot, MemoryType, SaveResult
from ..agent.memory.sync import ConsensusCheck
from ..agent.self_documents import SelfDocument
from ..errors import AgentError
from ..nostr.event import Event
from ..nostr.kinds import APP_DATA
from .events import MemoryChanged, OutboxChanged, ServiceEvent
from .labels import short_id
from .runtime import Runtime
from .versioning import diff_versions, pick_version, roll_back
from .views import MemoryStatus, MemoryVersionView, PendingPublish, RelayMemoryStatus


class MemoryService:
    def __init__(self, rt: Runtime, emit: Callable[[ServiceEvent], None], warn: Callable[[str], None]) -> None:
        self._rt, self._emit, self._warn = rt, emit, warn
        self._outbox_error: str | None = None
        rt.store.add_listener(self._changed)

    def _changed(self, snap: MemorySnapshot, origin: str) -> None:
        manager = self._rt.memory_manager
        if manager.backend is not None and snap.type is MemoryType.LONG_TERM and snap.loaded:
            self._rt.tasks.spawn(manager.index_long_term(snap.content))  # recall indexes the long-term memory
        self._emit(MemoryChanged(snap.type, snap, "local" if origin == "local" else "remote"))

    def lost(self, t: MemoryType, lost_event_id: str, winner_event_id: str) -> None:
        """This device's edit and another device's were concurrent; theirs won (MemorySync found out)."""
        self._emit(MemoryChanged(t, self._rt.store.snapshot(t), "remote", lost_local=True,
                                 lost_event_id=lost_event_id, winner_event_id=winner_event_id))

    def outbox_changed(self) -> None:
        error = self._rt.publisher.outbox_error
        if error and error != self._outbox_error:
            self._warn(f"{error}; memory edits are still sent, and stored once the file is writable")
        self._outbox_error = error
        self._rt.daemons.spawn(self._count_pending())

    async def _count_pending(self) -> None:
        self._emit(OutboxChanged(len(await self.pending_publishes())))

    # --- reading and saving ----------------------------------------------------------------------
    def snapshot(self, t: MemoryType | str) -> MemorySnapshot:
        return self._rt.store.snapshot(MemoryType.parse(t))

    def relay_versions(self, t: MemoryType | str) -> dict[str, tuple[str, int]]:
        return self._rt.store.relay_versions(MemoryType.parse(t))

    async def load_long_term(self) -> MemorySnapshot:
        return await self._rt.store.load_long_term()

    async def save(self, t: MemoryType | str, content: str) -> SaveResult:
        """The one save path (the tool's too): see :meth:`MemorySync.save`."""
        return await self._rt.sync.save(t, content)

    def not_persisted(self, event_id: str) -> str | None:
        """Why the version ``event_id`` is not written on this device (e.g. "disk full: ..."), or None when it
        is. Such a version lives in memory only: it is retried while the app runs and lost when it quits,
        unless a relay holds it."""
        publisher = self._rt.publisher
        if any(ev.id == event_id for ev in publisher.unsaved()):
            return publisher.outbox_error or "the memory edit could not be written to the outbox"
        return None

    def at_risk(self) -> list[str]:
        """Memory versions lost if the app quits now (on no relay, not written on this device), one line each."""
        publisher = self._rt.publisher
        reason = publisher.outbox_error or "it could not be written to the outbox"
        out = []
        for ev in publisher.unsaved_nowhere():
            t = self._own_memory_type(ev)
            what = f"the {t.title.lower()}" if t is not None else "a memory"
            out.append(f"your edit of {what} (event {short_id(ev.id)}) is on no relay yet and not saved on this "
                       f"device ({reason})")
        return out

    async def rollback(self, t: MemoryType | str, event_id: str) -> SaveResult:
        """Save an older version's text again: a new version, through the one save path."""
        t = MemoryType.parse(t)
        return await roll_back(await self.version(t, event_id), t.title.lower(), lambda text: self.save(t, text),
                               self._rt.sync.annotate, lambda result: result.event_id)

    # --- history ---------------------------------------------------------------------------------
    async def history(self, t: MemoryType | str) -> list[MemoryVersionView]:
        """Every version of memory ``t`` this app has seen (own saves and other devices'), newest first."""
        t = MemoryType.parse(t)
        store = self._rt.store
        current = store.snapshot(t).event_id
        return [MemoryVersionView(t, v.event_id, v.created_at, v.origin, v.note, v.seen_at, v.event_id == current,
                                  v.event, store.decrypt)
                for v in await self._rt.sync.versions(t)]

    async def version(self, t: MemoryType | str, event_id: str) -> MemoryVersionView:
        """One version from the history, by event id (or an unambiguous prefix of at least 4 characters)."""
        t = MemoryType.parse(t)
        return pick_version(await self.history(t), event_id, t.title.lower())

    async def diff(self, t: MemoryType | str, older_id: str, newer_id: str) -> str:
        """A unified diff between two versions of memory ``t`` (empty when their texts are equal)."""
        return await diff_versions(await self.version(t, older_id), await self.version(t, newer_id))

    # --- relays and the outbox -------------------------------------------------------------------
    async def status(self, t: MemoryType | str, *, bring_up_to_date: bool = False) -> MemoryStatus:
        """Ask every relay which version of memory ``t`` it holds (and read the newest back by id from those
        that acknowledged it); with ``bring_up_to_date`` lagging relays are sent the newest."""
        t = MemoryType.parse(t)
        check = await self._rt.sync.check(t, fix=bring_up_to_date)
        relays = tuple(_relay_status(h, check) for h in check.holdings)
        return MemoryStatus(t, check.newest_event_id, check.newest_created_at, relays,
                            tuple(await self.pending_publishes(t)))

    async def pending_publishes(self, t: MemoryType | SelfDocument | str | None = None) -> list[PendingPublish]:
        """Versions some relay still needs (of memory ``t``, or every self-document's), oldest first, from the outbox:
        ``pending`` ones no relay took yet, ``delivered`` ones some relays still lack, ``unsaved`` ones held
        in memory while the outbox file is not writable."""
        wanted = (SelfDocument.find(t) or MemoryType.parse(t)) if t is not None else None
        publisher, urls = self._rt.publisher, self._rt.pool.urls
        try:
            entries: list[OutboxEntry] = await asyncio.to_thread(publisher.outbox.unfinished, urls)
        except AgentError:
            entries = []
        rows = [(e.event, e.state, e.attempts, e.next_attempt_at, tuple(e.accepted_by),
                 tuple(e.relays_to_retry(urls)), e.last_error) for e in entries]
        rows += [(ev, "unsaved", 0, 0.0, (), tuple(urls), self._outbox_error or "") for ev in publisher.unsaved()]
        out: list[PendingPublish] = []
        for ev, *rest in rows:
            mt = self._own_memory_type(ev)
            if mt is not None and (wanted is None or mt is wanted):
                out.append(PendingPublish(mt, ev.id, ev.created_at, *rest))
        return out

    def _own_memory_type(self, ev: Event) -> MemoryType | SelfDocument | None:
        """Which of the agent's self-documents ``ev`` is a version of (the soul's and the task list's share the
        outbox: they count as pending, and as at risk at quit, like memory's)."""
        if ev.pubkey != self._rt.store.pubkey:
            return None
        doc = next((d for d in SelfDocument if ev.kind == d.kind and ev.d_tag == d.d_tag), None)
        return doc or (MemoryType.from_d_tag(ev.d_tag) if ev.kind == APP_DATA else None)


def _relay_status(h: RelayHolding, check: ConsensusCheck) -> RelayMemoryStatus:
    newest_id, outcome = check.newest_event_id, check.outcome
    lagging = h.reachable and newest_id is not None and h.event_id != newest_id
    verdict = outcome.results.get(h.url) if outcome is not None and lagging else None
    return RelayMemoryStatus(h.url, h.reachable, h.event_id, h.created_at, lagging, verdict,
                             acknowledged_not_serving=h.url in check.unserved)
