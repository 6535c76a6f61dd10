"""THE save path of every document: the agent's tools, the editor, the CLI, rollback, merges, the soul from the
config and the self-context all call :meth:`DocumentSaves.save`, and it reads top to bottom in
:meth:`DocumentSaves._publish`:

check once (the codec) → date after every version known, never more than ``sign_ahead_max_s`` ahead of the clock →
name the base (``["prev", id]``) → encrypt and sign (the signer) → adopt (the store: in use here from now on) → the
outbox → the relays (both the publisher's) → the history (delivered, or refused).

Its collaborators are explicit: the store (:class:`~.store.DocumentStore`: state only), the publisher
(:class:`~.publisher.DocumentPublisher`: the outbox and the relays) and the history (:class:`~.history_thread
.HistoryThread`). Bad input raises :class:`~.codec.DocumentError` before anything is signed; a save refused because
another writer's newer version is known raises :class:`~.versions.NewerVersionKnown`, is noted in the history, and
the newer version is fetched.

A burst of saves (the clock does not allow a date after the last one without signing ahead of it) is coalesced when
the caller does not wait, and an edit made while the remote signer does not answer waits for it (kept on disk):
shown at once, signed as soon as it can be (:mod:`.deferred`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import AgentError, SignerUnreachableError
from ...nostr.results import PublishOutcome
from ..background import BackgroundTasks
from .codec import DocumentError
from .dating import BURST_WAIT_MAX_S, SIGN_AHEAD_MAX_S, VersionDating
from .deferred import DeferredSaves, UnsignedEdits
from .history import REFUSED_NOTE
from .history_thread import HistoryThread
from .keys import DocumentKey
from .publisher import DocumentPublisher
from .store import DocumentStore
from .versions import DatedAheadError, NewerVersionKnown, SaveResult

log = logging.getLogger("didactyl.documents")


@dataclass(frozen=True, slots=True)
class Value:
    """An edit given as the document's value (the config's soul, a merged profile): checked as it is encoded."""

    value: Any


@dataclass(frozen=True, slots=True)
class Change:
    """A change of the value in use: ``derive(value in use)``, computed under the document's save lock (a task added
    to the list as it is now, a line inserted into a memory). Refused when the value in use is not known."""

    derive: Callable[[Any], Any]


Edit = str | Value | Change  # a str is an edited text, checked by the codec before anything is signed


def _not_saved(key: DocumentKey, why: str) -> NewerVersionKnown:
    return NewerVersionKnown(f"the {key.title.lower()} was not saved: {why}; your text is kept in the history "
                             f"(`{key.command('history')}`)", key.title)


class DocumentSaves:
    def __init__(
        self,
        store: DocumentStore,
        publisher: DocumentPublisher,
        history: HistoryThread,
        *,
        warn: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        sign_ahead_max_s: float = SIGN_AHEAD_MAX_S,
        unsigned: UnsignedEdits | None = None,
    ) -> None:
        self.store, self.publisher, self.history = store, publisher, history
        self.dating = VersionDating(clock, sign_ahead_max_s)
        self._clock = clock
        self._tasks = BackgroundTasks()  # fetches of a newer version after a refusal; cancelled at stop
        # A burst's newest text, or an edit waiting for the remote signer: shown now, signed later.
        self.deferred = DeferredSaves(store, self._save_now, self._tasks.spawn, warn, BURST_WAIT_MAX_S, unsigned,
                                      check=self.check, sign_delay=self.sign_delay)

    def check(self, key: DocumentKey, text: str) -> Any:
        """An edit's text as the document's value, checked by its codec (limits, format). DocumentError says what is
        wrong; nothing is signed."""
        if not isinstance(text, str):
            raise DocumentError(f"{key.title} content must be text", key.title)
        return self.store.codec(key).from_text(text, self.store.value(key), int(self._clock()))

    def sign_delay(self, key: DocumentKey) -> float:
        """Seconds until a new version of ``key`` can be dated after every version known without being dated more
        than ``sign_ahead_max_s`` ahead of the clock (0: now)."""
        return self.dating.delay(self.store.floor(key))

    # --- the one save -------------------------------------------------------------------------------
    async def save(self, key: DocumentKey, edit: Edit, *, wait: bool = True, encrypt: bool = True,
                   adopted: asyncio.Event | None = None) -> SaveResult:
        """Publish ``edit`` (a text, a :class:`Value` or a :class:`Change`) as a new version of ``key``; per-relay
        verdicts come back (relay failures do not raise: they are in the outcome, and the outbox retries).

        In a burst of saves the next date would be more than the allowed seconds ahead of the clock: with ``wait``
        the save waits (briefly) for the clock; without it (the agent's tools) the edit is kept and shown at once,
        and the burst's newest is signed and sent as soon as the clock allows (``SaveResult.deferred``). With the
        remote signer away the edit waits for it likewise. ``adopted`` is set once the new version is in use here
        (before the relays answer), or when the save ends without one."""
        try:
            if isinstance(edit, Change):
                return await self._change(key, edit.derive, wait=wait)
            value = edit.value if isinstance(edit, Value) else self.check(key, edit)
            # Only a burst is coalesced: a version dated far ahead (a fast clock elsewhere) is refused, below.
            if not wait and (key in self.deferred or 0 < self.sign_delay(key) <= BURST_WAIT_MAX_S):
                self.deferred.keep(key, value)
                return self._deferred_result(key)
            await self.deferred.discard(key)  # this newer edit supersedes one not signed yet
            return await self._save_now(key, value, encrypt=encrypt, adopted=adopted)
        finally:
            if adopted is not None:
                adopted.set()

    async def _change(self, key: DocumentKey, derive: Callable[[Any], Any], *, wait: bool) -> SaveResult:
        if key in self.deferred or (not wait and 0 < self.sign_delay(key) <= BURST_WAIT_MAX_S):
            self.store.snapshot(key).check_changeable()  # the text waiting is the one in use: the change is made to it
            await self.deferred.change(key, derive(self.store.value(key)))
            return self._deferred_result(key)
        derived: list[Any] = []

        def keeping(value: Any) -> Any:  # what the change made, kept should the signer not answer
            derived.append(derive(value))
            return derived[-1]

        try:
            return await self._save_now(key, None, derive=keeping)
        except SignerUnreachableError as exc:
            if not derived:
                raise
            await self.deferred.wait_for_signer(key, derived[-1], None, exc)
            return self._deferred_result(key)

    async def _save_now(self, key: DocumentKey, value: Any, base: str | None = None, *, encrypt: bool = True,
                        derive: Callable[[Any], Any] | None = None,
                        adopted: asyncio.Event | None = None) -> SaveResult:
        """:meth:`_publish`, and what its refusals mean (also the deferred edits' way out)."""
        try:
            return await self._publish(key, value, base, encrypt, derive, adopted)
        except DocumentError:
            raise  # bad input, or a change of a document that does not read: nothing was signed
        except SignerUnreachableError as exc:  # the key is in a remote signer that does not answer
            if value is None:
                raise  # a change of the value in use (a task added): kept by _change() with the value it made
            await self.deferred.wait_for_signer(key, value, base, exc)
            return self._deferred_result(key)
        except NewerVersionKnown:
            raise
        except AgentError as exc:
            self._tasks.spawn(self.store.load([key]))  # fetch the newer version the publisher knows of
            raise _not_saved(key, exc.message) from None

    async def _publish(self, key: DocumentKey, value: Any, base: str | None, encrypt: bool,
                       derive: Callable[[Any], Any] | None, adopted: asyncio.Event | None) -> SaveResult:
        """The pipeline, under the document's save lock."""
        store = self.store
        async with store.lock(key):
            # 1. check once: a change is made to the value in use, and only when that value is known
            if derive is not None:
                store.snapshot(key).check_changeable()
                value = derive(store.value(key))
            text = store.codec(key).to_text(value)
            held = store.current_event(key)
            # 2. date: after every version known, never far ahead of the clock
            try:
                await self.dating.wait(key, lambda: store.floor(key))
            except DatedAheadError as exc:
                kept = await store.events.build(key, value, int(self._clock()), held.id if held else None)
                store.kept_unpublished(key, kept)
                await self.history.annotate(kept.id, f"not published: {exc.message}")
                raise _not_saved(key, exc.message) from None
            created_at = self.dating.created_at(store.floor(key))
            # 3. base: the version it was edited from (a deferred edit's), else the one in use
            base = base or (held.id if held else None)
            # 4. encrypt and sign (the codec bounds the encoded value: DocumentError before anything is signed)
            ev = await store.events.build(key, value, created_at, base, encrypt=encrypt)
            # 5. adopt: in use here from now on (our own echo from the relays then finds nothing new)
            own = store.adopt_own(key, ev, value, text)
            if adopted is not None:
                adopted.set()
            # 6-7. the outbox, then the relays
            try:
                outcome = await self.publisher.publish(ev)
            except AgentError as exc:  # the publisher knows a newer version (another writer's): ours was not sent
                store.withdraw_own(key, own)
                await self.history.annotate(ev.id, REFUSED_NOTE)
                self._tasks.spawn(store.load([key]))  # fetch that newer version
                raise _not_saved(key, exc.message) from None
            except Exception as exc:  # the pool reports per relay; anything else is a bug we still survive
                log.exception("document publish failed")
                outcome = PublishOutcome(ev.id, {})
                store.warn(f"publishing the {key.title.lower()} failed: {exc}")
            snapshot = store.delivered_own(key, ev, outcome.accepted_by)
        # 8. the history: a version some relay holds is delivered (the outbox retries the rest)
        if outcome.any_accepted:
            await self.history.mark_delivered(ev.id)
        return SaveResult(key, ev.id, outcome, created_at, snapshot)

    def _deferred_result(self, key: DocumentKey) -> SaveResult:
        return SaveResult(key, "", PublishOutcome("", {}), 0, self.store.snapshot(key), deferred=True)

    # --- start and stop -----------------------------------------------------------------------------
    async def restore_unsigned(self) -> None:
        """At start: edits a previous run kept for the signer wait again (shown now, signed once it answers)."""
        await self.deferred.restore()

    async def flush(self, timeout: float) -> None:
        """Send what a burst left unsigned (at stop): waits for the clock, at most ``timeout`` seconds (an edit
        waiting for the signer stays on disk for the next start)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.deferred.flush()

    async def stop(self, timeout: float) -> None:
        await self.flush(min(timeout, self.dating.sign_ahead_max_s + 2))
        await self._tasks.cancel(timeout)
