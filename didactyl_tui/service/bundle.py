"""Backup bundles as a service part: export the agent's own signed events (memory, soul, tasks, identity,
notes) as the relays hold them plus the conversations; import verifies everything first, then republishes
through the memory publisher's outbox and restores the sessions. Files and crypto run on worker threads."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.bundle import (
    MAX_BUNDLE_BYTES,
    BundleError,
    read_bundle,
    read_bundle_with,
    write_bundle,
    write_bundle_with,
)
from ..agent.conversations.records import export_records, restore_records
from ..agent.conversations.store import ConversationStore
from ..agent.documents.keys import DocumentKey
from ..agent.documents.publisher import DocumentPublisher
from ..agent.private_files import PRIVATE_FILE_MODE
from ..errors import AgentError
from ..nostr.event import Event
from ..nostr.keys import SecretKey
from ..nostr.kinds import DM_RELAY_LIST, TEXT_NOTE
from ..nostr.nip46 import MAX_PLAINTEXT_BYTES
from ..nostr.pool import RelayPool
from ..nostr.signer import Signer

MAX_NOTES = 500  # the agent's latest public notes carried along


@dataclass(frozen=True, slots=True)
class BundleReport:
    path: str
    events: int
    sessions: int
    accepted: int = 0  # events some relay took now (import)
    pending: int = 0  # events kept in the outbox for later (import)
    skipped: tuple[str, ...] = ()  # why an event was not republished (a newer version is known)

    def to_json_dict(self) -> dict[str, Any]:
        return {"path": self.path, "events": self.events, "sessions": self.sessions, "accepted": self.accepted,
                "pending": self.pending, "skipped": list(self.skipped)}


def _own_filters(pubkey: str) -> list[dict[str, Any]]:
    return [
        *(key.filter(pubkey) for key in DocumentKey),  # every document of the agent's
        {"kinds": [DM_RELAY_LIST], "authors": [pubkey]},
        {"kinds": [TEXT_NOTE], "authors": [pubkey], "limit": MAX_NOTES},
    ]


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600) all at once: a temporary file beside it, then a rename."""
    path = path.expanduser()
    fd, tmp = tempfile.mkstemp(prefix=".bundle-", dir=path.parent or Path("."))
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_bounded(path: Path, limit: int) -> bytes:
    with path.expanduser().open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BundleError(f"{path} is over the {limit:,}-byte bundle limit")
    return data




class BundleService:
    """Export and import of the agent's backup bundle: the relays' versions of its events (``pool``), its
    conversations, sealed with its key (``key`` in hand, or through ``signer`` when the key is in a remote signer);
    an import republishes through ``publisher`` (outbox first)."""

    def __init__(self, *, key: SecretKey | None, signer: Signer, pool: RelayPool, publisher: DocumentPublisher,
                 conversations: ConversationStore, timeout_s: float, clock: Callable[[], float]) -> None:
        self._key, self._signer, self._pool, self._publisher = key, signer, pool, publisher
        self._conversations, self._timeout_s, self._clock = conversations, timeout_s, clock

    async def export(self, path: Path) -> BundleReport:
        """Everything the relays hold of the agent's own (newest versions) and every conversation."""
        me = self._signer.public_key
        events: list[Event] = [ev for ev in await self._pool.query(_own_filters(me), timeout=self._timeout_s)
                               if ev.pubkey == me]
        sessions = await asyncio.to_thread(export_records, self._conversations)
        created_at = int(self._clock())
        if self._key is not None:  # the key in hand: all of it on a worker thread
            text = await asyncio.to_thread(write_bundle, self._key, events, sessions, created_at=created_at)
        else:  # through the remote signer, in parts it can carry (NIP-44 inside NIP-46)
            text = await write_bundle_with(self._signer, events, sessions, created_at=created_at,
                                           part_bytes=MAX_PLAINTEXT_BYTES)
        try:
            await asyncio.to_thread(_write_private, path, text)
        except OSError as exc:
            raise AgentError(f"cannot write {path}: {exc.strerror or exc}", "Bundle") from None
        return BundleReport(str(path), len(events), len(sessions))

    async def import_(self, path: Path, *, max_bytes: int = MAX_BUNDLE_BYTES) -> BundleReport:
        """Verify the whole file first (a tampered bundle restores nothing), then republish and restore."""
        try:
            data = await asyncio.to_thread(_read_bounded, path, max_bytes)
        except OSError as exc:
            raise BundleError(f"cannot read {path}: {exc.strerror or exc}") from None
        if self._key is not None:
            bundle = await asyncio.to_thread(read_bundle, data, self._key, max_bytes=max_bytes)
        else:
            bundle = await read_bundle_with(data, self._signer, max_bytes=max_bytes)
        existing = [s["id"] for s in bundle.sessions
                    if await asyncio.to_thread(self._conversations.has_session, s["id"])]
        if existing:
            raise BundleError(f"{len(existing)} of the bundle's conversations already exist here "
                              f"(e.g. {existing[0]}); import into a data dir without them")
        accepted = pending = 0
        skipped: list[str] = []
        for ev in bundle.events:
            try:
                outcome = await self._publisher.publish(ev)  # outbox first: nothing is lost if relays are down
            except AgentError as exc:  # a newer version of this memory/soul/list is already known
                skipped.append(f"kind {ev.kind} {ev.id[:12]}: {exc.message}")
                continue
            if outcome.any_accepted:
                accepted += 1
            else:
                pending += 1
        await asyncio.to_thread(restore_records, self._conversations, bundle.sessions)
        return BundleReport(str(path), len(bundle.events), len(bundle.sessions), accepted, pending, tuple(skipped))
