"""How :class:`~.store.MemoryStore` takes in versions from relays: screened, decrypted, newest wins.

Foreign authors, wrong kinds or d tags, far-future dates, bad signatures and undecryptable content change
nothing (each is counted in ``dropped``); an undecryptable newer version is remembered so our next save
supersedes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import NostrError
from ...nostr import nip44
from ...nostr.event import Event
from ...nostr.kinds import APP_DATA
from ...nostr.replaceable import is_newer, is_newer_version
from .versions import MemoryType, VersionSeen

MAX_FUTURE_SECONDS = 15 * 60  # a version dated further ahead is refused (it would win forever)


@dataclass
class _Slot:
    event: Event | None = None
    content: str = ""
    loaded: bool = False
    floor_created_at: int = 0  # newest created_at seen for this memory, even if unreadable
    relay_versions: dict[str, tuple[str, int]] = field(default_factory=dict)  # url -> (event id, created_at)
    unreadable: tuple[Event, str] | None = None  # the newest version newer than ``event`` that does not decrypt


class IngestMixin:
    """The incoming half of :class:`~.store.MemoryStore` (state and listeners live there)."""

    def _screen(self, ev: Event) -> MemoryType | None:
        """The memory this event is a version of, or None (counted in ``dropped``) if we must ignore it."""
        reason, t = self._refusal(ev)
        if reason:
            self.dropped[reason] += 1
            return None
        return t

    def version_type(self, ev: Event) -> MemoryType | None:
        """The memory ``ev`` is an acceptable version of, or None (like ingest's checks; counts nothing)."""
        return self._refusal(ev)[1]

    def _refusal(self, ev: Event) -> tuple[str, MemoryType | None]:
        t: MemoryType | None = None
        if ev.pubkey != self.pubkey:
            reason = "foreign_author"
        elif ev.kind != APP_DATA:
            reason = "wrong_kind"
        elif (t := MemoryType.from_d_tag(ev.d_tag)) is None:
            reason = "wrong_d"
        elif ev.created_at > self._clock() + MAX_FUTURE_SECONDS:
            reason = "future"
        elif not ev.is_valid():
            reason = "invalid"
        else:
            return "", t
        return reason, None

    def decrypt(self, ev: Event) -> str:
        """The plaintext of one of our memory versions (in memory only). Raises NostrError."""
        if ev.content == "":
            return ""
        return nip44.decrypt(ev.content, self._conversation_key)

    def _note_relay(self, slot: _Slot, url: str | None, ev: Event) -> None:
        if not url:
            return
        known = slot.relay_versions.get(url)
        if known is None or is_newer_version(ev.created_at, ev.id, known[1], known[0]):
            slot.relay_versions[url] = (ev.id, ev.created_at)

    def ingest(self, url: str | None, ev: Event) -> bool:
        """Take one event from a relay (live subscription). Returns True when the memory changed.

        Foreign authors, wrong kinds or d tags, far-future dates, bad signatures and undecryptable
        content change nothing (each is counted in ``dropped``).
        """
        t = self._screen(ev)
        if t is None:
            return False
        slot = self._slots[t]
        cur = slot.event
        if cur is not None and (ev.id == cur.id or not is_newer(ev, cur)):
            self._note_relay(slot, url, ev)
            self._seen(VersionSeen(t, ev, "remote", url, False, None, None))
            return False
        if ev.id in self._undecryptable:
            return False
        try:
            content = self.decrypt(ev)
        except NostrError as exc:
            self._unreadable(t, ev, url, exc)
            return False
        self._note_relay(slot, url, ev)
        self._adopt(t, ev, content)
        self._seen(VersionSeen(t, ev, "remote", url, True, cur, content))
        self._notify(t, "remote")
        return True

    def _adopt(self, t: MemoryType, ev: Event, content: str) -> None:
        slot = self._slots[t]
        slot.event, slot.content, slot.loaded = ev, content, True
        slot.floor_created_at = max(slot.floor_created_at, ev.created_at)
        if slot.unreadable is not None and not is_newer(slot.unreadable[0], ev):
            slot.unreadable = None  # superseded: nothing unreadable is newer than the memory any more

    def _unreadable(self, t: MemoryType, ev: Event, url: str | None, exc: NostrError) -> None:
        """A valid, newer version that does not decrypt: the memory keeps the newest one that does; the bad
        one is remembered (floor, warning, history) so our next save supersedes it."""
        slot = self._slots[t]
        self._undecryptable.add(ev.id)
        self.dropped["undecryptable"] += 1
        self._note_relay(slot, url, ev)
        slot.floor_created_at = max(slot.floor_created_at, ev.created_at)
        if slot.unreadable is None or is_newer(ev, slot.unreadable[0]):
            slot.unreadable = (ev, url or "")
        where = f" on {url}" if url else ""
        self._warn(f"the newest {t.title.lower()} version (event {ev.id[:12]}…{where}) does not decrypt with this "
                   f"key ({exc.message}); keeping the previous version; your next save replaces it")
        self._seen(VersionSeen(t, ev, "remote", url, False, None, None, unreadable=True))
        self._notify(t, "remote")
