"""The soul and the task list versioned like memory, for the views: the current text, THE save (the soul's
lint-then-publish, the task book's save; both through the memory publisher's outbox), history, diff, rollback,
and concurrent edits from another writer (the CLI, another device): the same rule as memory
(:func:`~didactyl_tui.agent.memory.lineage.lost_local_edit`), the same ``MemoryChanged`` news, the same merge
view. Every version is kept in the memory history (encrypted, as it travels); SQLite work runs off the loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..agent.memory.lineage import lost_local_edit
from ..agent.memory.store import MemorySnapshot, SaveResult
from ..agent.self_documents import SelfDocument
from ..agent.soul import SoulTemplate
from ..agent.soul_event import soul_event_text, soul_to_json
from ..agent.soul_lint import check_soul
from ..agent.tasks import TaskList, read_tasks_event
from ..agent.tools.registry import ToolRegistry
from ..errors import AgentError, ConfigError
from ..nostr.event import Event
from ..nostr.replaceable import is_newer
from ..nostr.results import PublishOutcome
from .events import MemoryChanged, ServiceEvent
from .runtime import Runtime
from .soul import SoulService, read_soul_text
from .tasks import build_task_book
from .versioning import diff_versions, pick_version, roll_back
from .views import MemoryVersionView

log = logging.getLogger("didactyl.service.self_documents")

SOUL, TASKS = SelfDocument.SOUL, SelfDocument.TASKS


class SelfDocService:
    def __init__(self, rt: Runtime, soul: SoulService, registry: ToolRegistry, clock: Callable[[], float],
                 emit: Callable[[ServiceEvent], None], warn: Callable[[str], None]) -> None:
        self._rt, self._soul, self._emit, self._warn, self._clock = rt, soul, emit, warn, clock
        self._on_soul: Callable[[str, Event], None] | None = None
        # The agent's task list (its tools' too), published through this part: versioned like memory.
        self.book = self._book = build_task_book(rt, clock, publish=lambda ev: self._publish(TASKS, ev),
                                                 base=self.tasks_base, loaded=self.loaded)
        self._registry = registry
        # The newest version of each judged here (published here, read at start or seen live): the task list's is
        # the one in use; the soul service holds the soul in use (a soul it adopted by itself is still judged).
        self._known: dict[SelfDocument, Event | None] = {SOUL: None, TASKS: None}
        self._own: set[str] = set()  # versions being published here (their echo is not another writer's)
        soul.publish_event = lambda ev: self._publish(SOUL, ev)
        soul.versions_read = lambda events: self.loaded_versions(SOUL, events)
        self._relays: dict[SelfDocument, set[str]] = {SOUL: set(), TASKS: set()}

    # --- reading ----------------------------------------------------------------------------------
    def text_of(self, doc: SelfDocument, ev: Event) -> str:
        """The text a version shows as (decrypted; the task list one task a line). Raises AgentError."""
        if doc is SOUL:
            return soul_event_text(ev, self._rt.key)
        return read_tasks_event(ev, self._rt.key).to_text()

    def current_text(self, doc: SelfDocument) -> str:
        return soul_to_json(self._soul.view().template) if doc is SOUL else self._book.current.to_text()

    def event(self, doc: SelfDocument) -> Event | None:
        """The version in use (None: not on the relays yet)."""
        return self._soul.event if doc is SOUL else self._known[TASKS]

    def snapshot(self, doc: SelfDocument) -> MemorySnapshot:
        ev = self.event(doc)
        return MemorySnapshot(doc, self.current_text(doc), doc.limit_chars,
                              ev.id if ev else None, ev.created_at if ev else None,
                              tuple(sorted(self._relays[doc])), True)

    # --- saving: each document's own path, through the memory publisher -------------------------------------
    async def save(self, doc: SelfDocument, text: str) -> SaveResult:
        """The editor's, the merge view's and rollback's save. Bad text (a soul the linter refuses, naming its
        section) raises AgentError before anything is signed; nothing is published then."""
        if doc is SOUL:
            try:
                template = read_soul_text("the edited soul", text)
            except ConfigError as exc:
                raise AgentError(exc.message, "Bad soul") from None
            outcome = await self._soul.publish(template)
        else:
            edited = TaskList.from_json(text).touched(self._book.current, int(self._clock()))
            outcome = await self._book.replace(edited)
        ev = self.event(doc)
        created_at = ev.created_at if ev is not None and ev.id == outcome.event_id else 0
        return SaveResult(doc, outcome.event_id, outcome, created_at, self.snapshot(doc))

    async def _publish(self, doc: SelfDocument, ev: Event) -> PublishOutcome:
        """Every soul and task-list version signed here goes out this way: the memory publisher (outbox first,
        then every relay, retried), then :meth:`published`."""
        self._own.add(ev.id)
        try:
            outcome = await self._rt.publisher.publish(ev)
            await self.published(doc, ev, outcome)
        finally:
            self._own.discard(ev.id)
        return outcome

    def tasks_base(self) -> str | None:
        known = self._known[TASKS]
        return known.id if known else None

    async def published(self, doc: SelfDocument, ev: Event, outcome: PublishOutcome) -> None:
        """A version published here: kept in the history (the soul service keeps its own), delivered where a
        relay took it, current, and the views told."""
        history = self._rt.history
        if doc is TASKS:
            await self._history(history.record, ev, "local")
        self._know(doc, ev)
        if outcome.any_accepted:
            await self._history(history.mark_delivered, ev.id)
        if self._known[doc] is ev:
            self._relays[doc] = set(outcome.accepted_by)
        self._emit(MemoryChanged(doc, self.snapshot(doc), "local"))

    async def loaded(self, ev: Event) -> None:
        """The task list's version read from the relays (at start): judged, kept in the history, in use."""
        await self.loaded_versions(TASKS, [ev])

    async def loaded_versions(self, doc: SelfDocument, events: list[Event]) -> None:
        """Versions read from the relays at start: the newest is judged as a live one is (a concurrent edit
        made while this device was away is told, both texts kept), and all are kept in the history."""
        if not events:
            return
        newest = min(events, key=lambda ev: (-ev.created_at, ev.id))  # NIP-01: newest, ties to the lowest id
        try:
            text: str | None = await asyncio.to_thread(self.text_of, doc, newest)
        except AgentError:
            text = None  # does not read: never judged against ours
        lost = await self._history(self._judge_and_record, doc, newest, None, text)
        await self._history(self._record_all, events)
        self._know(doc, newest)
        if isinstance(lost, str):
            self._tell_lost(doc, lost, newest)

    def _read(self, doc: SelfDocument, ev: Event) -> tuple[str, SoulTemplate | TaskList]:
        """(On a worker thread.) ``ev``'s text and what it holds, checked: a soul read and linted, a task list
        parsed. Raises AgentError (or ConfigError) saying why it cannot be used."""
        text = self.text_of(doc, ev)
        if doc is TASKS:
            return text, TaskList.from_json(text)
        return text, check_soul(read_soul_text(f"soul event {ev.id[:12]}", text), self._registry)

    def _know(self, doc: SelfDocument, ev: Event) -> bool:
        """``ev`` is the newest version of ``doc`` judged here, unless a newer one is (True when it became it)."""
        known = self._known[doc]
        if known is not None and not is_newer(ev, known):
            return False
        self._known[doc] = ev
        return True

    def _record_all(self, events: list[Event]) -> None:
        for ev in events:
            self._rt.history.record(ev, "remote")
            self._rt.history.mark_delivered(ev.id)  # a relay serves it: others can read it

    def _judge_and_record(self, doc: SelfDocument, ev: Event, replaced: str | None, text: str | None) -> str | None:
        """(On a worker thread.) Memory's rule: the id of this device's latest save when ``ev`` is a concurrent
        edit of it (annotated as lost), else None; then ``ev`` is kept."""
        me = self._rt.key.public_key_hex
        # Judged once per version by this part (``_known``), whoever recorded it first (a soul service of its own).
        lost = None if text is None else lost_local_edit(self._rt.history, me, ev, replaced,
                                                          lambda ours: self._same(doc, ours, text),
                                                          once_recorded=False)
        self._record_all([ev])
        return lost

    def _tell_lost(self, doc: SelfDocument, lost: str, winner: Event) -> None:
        self._warn(f"concurrent edit of the {doc.title.lower()}: your version {lost[:8]} and another writer's "
                   f"version {winner.id[:8]} were both edited from an older version; theirs (newer) is in use and "
                   "yours is kept in its history; to merge, open the merge view")
        self._emit(MemoryChanged(doc, self.snapshot(doc), "remote", lost_local=True,
                                 lost_event_id=lost, winner_event_id=winner.id))

    # --- versions from other writers --------------------------------------------------------------------
    def follow(self, on_soul: Callable[[str, Event], None] | None = None) -> None:
        """Subscribe to newer souls and task lists of this key (another device, the CLI); every soul heard is
        also given to ``on_soul`` (the soul service's live path decides the soul in use). No ``since``: each
        relay first serves the version it holds, news only if newer than the one known (so a version saved
        elsewhere during the start-up read is not missed, and a relay replaying old versions is not sending
        events outside the filter, which the client counts against it)."""
        me = self._rt.key.public_key_hex
        filters = [{"kinds": [doc.kind], "authors": [me], "#d": [doc.d_tag]} for doc in SelfDocument]
        self._on_soul = on_soul
        sub = self._rt.pool.subscribe(filters, self._arrived)
        self._rt.closers.push_async_callback(sub.close)

    def _arrived(self, url: str, ev: Event) -> None:
        doc = next((d for d in SelfDocument if ev.kind == d.kind and ev.d_tag == d.d_tag), None)
        if doc is None or ev.pubkey != self._rt.key.public_key_hex:
            return
        if doc is SOUL and self._on_soul is not None:
            self._on_soul(url, ev)
        current = self._known[doc]
        if ev.id in self._own or (current is not None and ev.id == current.id):
            self._relays[doc].add(url)
        elif current is None or is_newer(ev, current):
            self._rt.daemons.spawn(self.seen(doc, ev, url))

    async def seen(self, doc: SelfDocument, ev: Event, url: str | None = None) -> None:
        """A newer version from another writer: judged (a concurrent edit of ours is told, both texts kept),
        recorded, and — when it reads (a soul must lint) — the document from then on."""
        current = self._known[doc]
        if ev.id in self._own or (current is not None and not is_newer(ev, current)):
            return
        try:
            text, read = await asyncio.to_thread(self._read, doc, ev)
        except (AgentError, ConfigError) as exc:
            await self._history(self._rt.history.record, ev, "remote", f"not used: {exc.message}")
            if doc is TASKS:  # (a refused soul is told by the soul service's own live path, soul_live.py)
                self._warn(f"a newer task list (event {ev.id[:12]}) was not used: {exc.message}")
            return
        replaced = current.id if current is not None else None
        lost = await self._history(self._judge_and_record, doc, ev, replaced, text)
        await self._rt.publisher.note_remote(ev)  # a save based on an older version is refused from now on
        # The soul in use is the soul service's to change (soul_live.py: its rules, its SoulChanged news); the task
        # list in use is this part's.
        self._know(doc, ev)
        if isinstance(read, TaskList) and self._known[TASKS] is ev:
            self._book.adopt(read)
        self._relays[doc] = {url} if url else set()
        if isinstance(lost, str):
            self._tell_lost(doc, lost, ev)
        else:
            self._emit(MemoryChanged(doc, self.snapshot(doc), "remote"))

    def _same(self, doc: SelfDocument, ours: Event, theirs_text: str) -> bool:
        try:
            return self.text_of(doc, ours) == theirs_text
        except AgentError:
            return True  # ours does not read: nothing to merge

    async def _history(self, fn: Callable[..., object], *args: object) -> object:
        try:
            return await asyncio.to_thread(fn, *args)
        except AgentError as exc:
            self._warn(f"the history was not written: {exc.message}")
        except Exception as exc:  # a locked or closed file: one warning, never out of a save
            log.warning("history: %s", exc)
        return None

    # --- history ----------------------------------------------------------------------------------------
    async def history(self, doc: SelfDocument) -> list[MemoryVersionView]:
        """Every version of ``doc`` this app has seen (its own saves and other writers'), newest first."""
        me, ev = self._rt.key.public_key_hex, self.event(doc)
        current = ev.id if ev is not None else None
        versions = await asyncio.to_thread(self._rt.history.versions, doc.d_tag, me)
        return [MemoryVersionView(doc, v.event_id, v.created_at,
                                  "local" if v.origin in ("local", "own") else "remote", v.note, v.seen_at,
                                  v.event_id == current, v.event, lambda ev, d=doc: self.text_of(d, ev))
                for v in versions if v.event.kind == doc.kind]

    async def version(self, doc: SelfDocument, event_id: str) -> MemoryVersionView:
        return pick_version(await self.history(doc), event_id, doc.title.lower())

    async def diff(self, doc: SelfDocument, older_id: str, newer_id: str) -> str:
        return await diff_versions(await self.version(doc, older_id), await self.version(doc, newer_id))

    async def rollback(self, doc: SelfDocument, event_id: str) -> SaveResult:
        """An older version's text saved again (linted first, for the soul): a new version."""
        return await roll_back(await self.version(doc, event_id), doc.title.lower(),
                               lambda text: self.save(doc, text),
                               lambda eid, note: self._history(self._rt.history.annotate, eid, note),
                               lambda result: result.event_id)
