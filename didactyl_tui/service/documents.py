"""The agent's documents as the views use them — short- and long-term memory, the soul, the task list, the profile,
contacts and relay list alike: snapshots, saving (through THE save path, ``DocumentSaves.save``, which the agent's
tools call too), rollback,
history, diff, relay status with repair, and the outbox. SQLite and decryption run off the loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..agent.background import BackgroundTasks
from ..agent.documents.consensus import ConsensusCheck, RelayHolding
from ..agent.documents.keys import DocumentKey
from ..agent.documents.outbox import OutboxEntry
from ..agent.documents.publisher import DocumentPublisher
from ..agent.documents.saving import DocumentSaves, Edit
from ..agent.documents.store import DocumentStore
from ..agent.documents.sync import DocumentSync
from ..agent.documents.text_diff import unified_diff
from ..agent.documents.versions import DocumentSnapshot, SaveResult
from ..agent.identity.cache import IdentityCache
from ..agent.memory.backend import MemoryManager
from ..errors import AgentError
from ..nostr.event import Event
from ..nostr.pool import RelayPool
from .events import DocumentChanged, OutboxChanged, ServiceEvent, SoulChanged
from .labels import short_id
from .views import DocumentStatus, DocumentVersionView, PendingPublish, RelayDocumentStatus

log = logging.getLogger("didactyl.service")

SELF_CONTEXT = (DocumentKey.PROFILE, DocumentKey.CONTACTS, DocumentKey.RELAYS)
# Attached without the agent's signer: its documents are encrypted to a key this window cannot use.
KEY_ELSEWHERE = "the agent's key is elsewhere: set [signer] bunker to see and edit them (docs/attach.md)"


class DocumentService:
    """The documents as the views use them: read from ``store``, saved through ``saves`` (THE save path),
    versions and relay checks from ``sync``, the outbox through ``publisher`` (the relays in use: ``pool``).
    A document that changes reaches ``emit``; the agent's own profile, contacts and relay list its identity cache
    (``agent_identity``); the long-term memory the recall index (``memory_manager``, in ``tasks``). ``readable``:
    false when attached without the agent's key (its documents are not loaded)."""

    def __init__(self, *, store: DocumentStore, saves: DocumentSaves, sync: DocumentSync,
                 publisher: DocumentPublisher, pool: RelayPool, agent_identity: IdentityCache,
                 memory_manager: MemoryManager, tasks: BackgroundTasks, daemons: BackgroundTasks,
                 readable: bool, emit: Callable[[ServiceEvent], None], warn: Callable[[str], None]) -> None:
        self._store, self._saves, self._sync, self._publisher, self._pool = store, saves, sync, publisher, pool
        self._agent_identity, self._memory_manager = agent_identity, memory_manager
        self._tasks, self._daemons, self._readable = tasks, daemons, readable
        self._emit, self._warn = emit, warn
        self._outbox_error: str | None = None
        self._soul_in_use: str | None = None  # the soul version the views were last told of
        self._started = False  # what a start finds (loaded, restored) is the baseline, not news
        self._soul_known = False  # the relays have answered for the soul (or a version of it is in use)
        store.add_listener(self._changed)
        sync.add_lost_listener(self.lost)
        publisher.add_change_listener(self.outbox_changed)

    def _changed(self, snap: DocumentSnapshot, origin: str) -> None:
        key, manager = snap.type, self._memory_manager
        if key is DocumentKey.LONG_TERM and manager.backend is not None and snap.loaded:
            self._tasks.spawn(manager.index_long_term(snap.content))  # recall indexes the long-term memory
        if key in SELF_CONTEXT:
            ev = self._store.current_event(key)
            if ev is not None:  # the context tools read the agent's identity from its cache
                self._agent_identity.put_own(ev, snap.relays)
        if key is DocumentKey.SOUL and snap.event_id != self._soul_in_use:
            self._soul_in_use = snap.event_id
            # News only when the soul in use, once known, is replaced after the start by one published elsewhere:
            # what a run first finds (the relays' version, or one kept here) was there before, not "newer".
            if (self._started and self._soul_known and origin == "remote" and snap.event_id is not None
                    and snap.created_at):
                relay = snap.relays[0] if snap.relays else ""
                log.info("a newer soul is in use: event %s from %s", snap.event_id[:12], relay or "a relay")
                self._emit(SoulChanged(snap.event_id, snap.created_at, tuple(snap.value.names), relay))
        if key is DocumentKey.SOUL:
            self._soul_known = self._soul_known or snap.loaded or snap.event_id is not None
        self._emit(DocumentChanged(key, snap, "local" if origin == "local" else "remote"))

    def started(self) -> None:
        """The start's loads and restores are done: a version replacing the one in use from now on is news."""
        self._started = True

    def lost(self, key: DocumentKey, lost_event_id: str, winner_event_id: str) -> None:
        """This device's edit and another writer's were concurrent; theirs won (the sync found out)."""
        self._emit(DocumentChanged(key, self._store.snapshot(key), "remote", lost_local=True,
                                 lost_event_id=lost_event_id, winner_event_id=winner_event_id))

    def outbox_changed(self) -> None:
        error = self._publisher.outbox_error
        if error and error != self._outbox_error:
            self._warn(f"{error}; edits are still sent, and stored once the file is writable")
        self._outbox_error = error
        self._daemons.spawn(self._count_pending())

    async def _count_pending(self) -> None:
        self._emit(OutboxChanged(len(await self.pending_publishes())))

    # --- reading and saving ----------------------------------------------------------------------
    @property
    def unavailable(self) -> str | None:
        """Why the agent's memory, soul and tasks cannot be shown or edited here, in one line (None: they can)."""
        return None if self._readable else KEY_ELSEWHERE

    def snapshot(self, key: DocumentKey) -> DocumentSnapshot:
        return self._store.snapshot(key)

    def value(self, key: DocumentKey) -> Any:
        """What a document's text means (a soul template, a task list…), as in use now."""
        return self._store.value(key)

    def relay_versions(self, key: DocumentKey) -> dict[str, tuple[str, int]]:
        """For each relay, the newest version (event id, created_at) of ``key`` it has shown us."""
        return self._store.relay_versions(key)

    async def load_long_term(self) -> DocumentSnapshot:
        store = self._store
        if store.snapshot(DocumentKey.LONG_TERM).loaded:
            return store.snapshot(DocumentKey.LONG_TERM)
        return (await store.load([DocumentKey.LONG_TERM]))[DocumentKey.LONG_TERM]

    async def save(self, key: DocumentKey, edit: Edit, *, encrypt: bool = True) -> SaveResult:
        """An edited text (the editor's, the CLI's, the merge view's, rollback's) or a value a part of the service
        built (``Value``: the config's soul), through THE save path."""
        return await self._saves.save(key, edit, encrypt=encrypt)

    def not_persisted(self, event_id: str) -> str | None:
        """Why the version ``event_id`` is not written on this device (e.g. "disk full: ..."), or None when it
        is. Such a version lives in memory only: it is retried while the app runs and lost when it quits,
        unless a relay holds it."""
        publisher = self._publisher
        if any(ev.id == event_id for ev in publisher.unsaved()):
            return publisher.outbox_error or "the edit could not be written to the outbox"
        return None

    def at_risk(self) -> list[str]:
        """Edits lost if the app quits now (on no relay, not written on this device), one line each."""
        publisher = self._publisher
        reason = publisher.outbox_error or "it could not be written to the outbox"
        out = []
        for ev in publisher.unsaved_nowhere():
            key = self._own_document(ev)
            what = f"the {key.title.lower()}" if key is not None else "a document"
            out.append(f"your edit of {what} (event {short_id(ev.id)}) is on no relay yet and not saved on this "
                       f"device ({reason})")
        return out

    async def rollback(self, key: DocumentKey, event_id: str) -> SaveResult:
        """An older version's text saved again (checked like any edit): a new version; history is not rewritten."""
        version = await self.version(key, event_id)
        if version.current:
            raise AgentError(f"version {short_id(version.event_id)} is already the current {key.title.lower()}",
                             "Rollback")
        result = await self.save(key, version.content)
        await self._sync.annotate(result.event_id, f"rollback to {short_id(version.event_id)}")
        return result

    # --- history ---------------------------------------------------------------------------------
    async def history(self, key: DocumentKey) -> list[DocumentVersionView]:
        """Every version of ``key`` this app has seen (own saves and other writers'), newest first, each read (a
        version that does not read says why)."""
        store = self._store
        current = store.snapshot(key).event_id
        versions = await self._sync.versions(key)

        async def view(v: Any) -> DocumentVersionView:
            try:
                text, problem = (await store.read(v.event))[1], ""
            except AgentError as exc:
                text, problem = None, exc.message
            return DocumentVersionView(key, v.event_id, v.created_at, v.origin, v.note, v.seen_at,
                                       v.event_id == current, v.event, text, problem)

        return list(await asyncio.gather(*(view(v) for v in versions)))

    async def version(self, key: DocumentKey, event_id: str) -> DocumentVersionView:
        """One version from the history, by event id (or an unambiguous prefix of at least 4 characters)."""
        wanted = event_id.strip().lower()
        versions = await self.history(key)
        exact = [v for v in versions if v.event_id == wanted]
        found = exact or ([v for v in versions if v.event_id.startswith(wanted)] if len(wanted) >= 4 else [])
        if len(found) != 1:
            state = "is ambiguous" if found else "is not"
            raise AgentError(f"{event_id!r} {state} in the {key.title.lower()} history", "History")
        return found[0]

    async def diff(self, key: DocumentKey, older_id: str, newer_id: str) -> str:
        """A unified diff between two versions' texts (empty when they are equal)."""
        old, new = await self.version(key, older_id), await self.version(key, newer_id)
        return await asyncio.to_thread(lambda: unified_diff(old.content, new.content, old_label=old.label,
                                                            new_label=new.label))

    # --- relays and the outbox -------------------------------------------------------------------
    async def status(self, key: DocumentKey, *, bring_up_to_date: bool = False) -> DocumentStatus:
        """Ask every relay which version of ``key`` it holds (and read the newest back by id from those that
        acknowledged it); with ``bring_up_to_date`` lagging relays are sent the newest."""
        check = await self._sync.check(key, fix=bring_up_to_date)
        relays = tuple(_relay_status(h, check) for h in check.holdings)
        return DocumentStatus(key, check.newest_event_id, check.newest_created_at, relays,
                              tuple(await self.pending_publishes(key)))

    async def deliver_pending(self) -> None:
        """Send what the outbox has due now (a save an earlier run left waiting): finishing a write, not a new one.
        A relay that takes a version counts as holding it at once (as its own echo of it will say, later), so a
        command that reads right after shows where it is."""
        try:
            store, sent = self._store, await self._publisher.retry_due()
            for ev, outcome in sent:
                if store.events.key_of(ev) is None:
                    continue  # not one of the documents (it would count as a stray event)
                for url in outcome.accepted_by:
                    await store.take(url, ev)
        except Exception as exc:  # relay trouble shows in the outbox; never out of a command
            self._warn(f"the outbox could not be sent: {exc}")

    async def pending_publishes(self, key: DocumentKey | None = None) -> list[PendingPublish]:
        """Versions some relay still needs (of ``key``, or of every document), oldest first, from the outbox:
        ``pending`` ones no relay took yet, ``delivered`` ones some relays still lack, ``unsaved`` ones held in
        memory while the outbox file is not writable."""
        wanted = key
        publisher, urls = self._publisher, self._pool.urls
        try:
            entries: list[OutboxEntry] = await asyncio.to_thread(publisher.outbox.unfinished, urls)
        except AgentError:
            entries = []
        rows = [(e.event, e.state, e.attempts, e.next_attempt_at, tuple(e.accepted_by),
                 tuple(e.relays_to_retry(urls)), e.last_error) for e in entries]
        rows += [(ev, "unsaved", 0, 0.0, (), tuple(urls), self._outbox_error or "") for ev in publisher.unsaved()]
        out: list[PendingPublish] = []
        for row in rows:
            ev = row[0]
            doc = self._own_document(ev)
            if doc is not None and (wanted is None or doc is wanted):
                out.append(PendingPublish(doc, ev.id, ev.created_at, *row[1:]))
        return out

    def _own_document(self, ev: Event) -> DocumentKey | None:
        """Which of the agent's documents ``ev`` is a version of."""
        if ev.pubkey != self._store.pubkey:
            return None
        return DocumentKey.of_event(ev.kind, ev.d_tag)


def _relay_status(h: RelayHolding, check: ConsensusCheck) -> RelayDocumentStatus:
    newest_id, outcome = check.newest_event_id, check.outcome
    lagging = h.reachable and newest_id is not None and h.event_id != newest_id
    verdict = outcome.results.get(h.url) if outcome is not None and lagging else None
    return RelayDocumentStatus(h.url, h.reachable, h.event_id, h.created_at, lagging, verdict,
                               acknowledged_not_serving=h.url in check.unserved)
