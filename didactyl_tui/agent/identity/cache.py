"""Self- and admin-context: a cache of one pubkey's kind 0 (profile), 3 (contacts), 10002 (relays), 1 (notes).

Filled by a start-up query and kept current by a live subscription; read by the context tools and the
soul (cache only, never the network). Also builds the agent's own kind 0/3/10002 from the config and
tells whether they differ from what the relays hold, so the service publishes only real changes.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import NostrError
from ...nostr import nip19
from ...nostr.event import Event
from ...nostr.keys import is_hex_pubkey
from ...nostr.kinds import CONTACTS, METADATA, RELAY_LIST, TEXT_NOTE
from ...nostr.replaceable import is_newer, newest_first
from ..documents.versions import SourceEvent

log = logging.getLogger(__name__)

MAX_FUTURE_SECONDS = 15 * 60
PROFILE_FIELDS = ("name", "about", "picture")  # the kind 0 fields the config manages


def pubkey_hex(text: str) -> str:
    """Hex or npub → lowercase hex; ValueError saying what is wrong otherwise."""
    value = text.strip()
    if value.lower().startswith("npub1"):
        try:
            return nip19.decode_npub(value)
        except NostrError as exc:
            raise ValueError(f"{value!r} is not a valid npub ({exc.message})") from None
    if is_hex_pubkey(value):
        return value.lower()
    raise ValueError(f"{value!r} is not a public key (64 hex characters or npub1…)")


@dataclass(frozen=True, slots=True)
class IdentityView:
    """Public data about one pubkey, as cached. Notes newest first."""

    pubkey: str
    npub: str
    profile: dict[str, Any]
    contacts: list[str]
    relays: list[tuple[str, str]]  # (url, "read" | "write" | "")
    notes: list[Event]
    profile_event: Event | None = None
    contacts_event: Event | None = None
    relays_event: Event | None = None
    loaded: bool = False


@dataclass(frozen=True, slots=True)
class SelfContextSnapshot:
    agent: IdentityView
    admin: IdentityView | None


def profile_of(ev: Event | None) -> dict[str, Any]:
    if ev is None:
        return {}
    try:
        data = json.loads(ev.content)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def contacts_of(ev: Event | None) -> list[str]:
    if ev is None:
        return []
    seen: dict[str, None] = {}
    for pk in ev.tag_values("p"):
        if is_hex_pubkey(pk):
            seen.setdefault(pk.lower(), None)
    return list(seen)


def relays_of(ev: Event | None) -> list[tuple[str, str]]:
    if ev is None:
        return []
    out: list[tuple[str, str]] = []
    for tag in ev.tags:
        if len(tag) >= 2 and tag[0] == "r":
            marker = tag[2] if len(tag) >= 3 and tag[2] in ("read", "write") else ""
            out.append((tag[1], marker))
    return out


class IdentityCache:
    """The cached public identity of one pubkey."""

    def __init__(self, pubkey: str, *, notes_limit: int = 20, clock: Callable[[], float] | None = None,
                 own_documents: bool = False) -> None:
        """``own_documents``: the agent's own cache, whose profile, contacts and relay list are its documents (read
        and versioned by the document store, given here by :meth:`put_own`): only its notes are fetched here."""
        self.pubkey = pubkey
        self.own_documents = own_documents
        self.npub = nip19.encode_npub(pubkey)
        self.notes_limit = notes_limit
        self._clock = clock or time.time
        self._replaceable: dict[int, Event] = {}
        self._notes: dict[str, Event] = {}
        self._view: IdentityView | None = None
        self.loaded = False
        self.version = 0  # bumped on every change
        self.rendered: dict[str, str] = {}  # memo for the context tools' markdown, cleared on change
        self.dropped: Counter[str] = Counter()
        self._served: dict[str, set[str]] = {}  # cached event id -> relays that sent it (provenance)
        self._listeners: list[Callable[[], None]] = []

    def filters(self) -> list[dict[str, Any]]:
        notes = {"authors": [self.pubkey], "kinds": [TEXT_NOTE], "limit": self.notes_limit}
        if self.own_documents:
            return [notes]
        return [{"authors": [self.pubkey], "kinds": [METADATA, CONTACTS, RELAY_LIST]}, notes]

    def put_own(self, ev: Event, relays: Iterable[str]) -> None:
        """The version of a profile, contact list or relay list the document store uses (it judged it: newest
        that reads), and the relays that hold it."""
        self._served[ev.id] = set(relays)
        if self._replaceable.get(ev.kind) is not ev:
            self._replaceable[ev.kind] = ev
            self._changed()

    def add_listener(self, cb: Callable[[], None]) -> Callable[[], None]:
        self._listeners.append(cb)
        return lambda: self._listeners.remove(cb) if cb in self._listeners else None

    def _changed(self) -> None:
        self._view = None
        self.rendered.clear()
        self.version += 1
        for cb in list(self._listeners):
            try:
                cb()
            except Exception:
                log.exception("identity listener failed")

    def _accept(self, ev: Event) -> bool:
        if ev.pubkey != self.pubkey:
            self.dropped["foreign_author"] += 1
            return False
        if ev.kind not in (METADATA, CONTACTS, RELAY_LIST, TEXT_NOTE) or (self.own_documents and ev.kind != TEXT_NOTE):
            self.dropped["wrong_kind"] += 1
            return False
        if ev.created_at > self._clock() + MAX_FUTURE_SECONDS:
            self.dropped["future"] += 1
            return False
        return True

    def _put(self, ev: Event) -> bool:
        if ev.kind == TEXT_NOTE:
            if ev.id in self._notes:
                return False
            self._notes[ev.id] = ev
            if len(self._notes) > self.notes_limit:
                keep = sorted(self._notes.values(), key=newest_first)[: self.notes_limit]
                self._notes = {e.id: e for e in keep}
                return ev.id in self._notes
            return True
        cur = self._replaceable.get(ev.kind)
        if cur is not None and (cur.id == ev.id or not is_newer(ev, cur)):
            return False
        self._replaceable[ev.kind] = ev
        return True

    def ingest(self, url: str | None, ev: Event) -> bool:
        """One event from a relay (live or fetched). Returns True when the cache changed."""
        if not self._accept(ev):
            return False
        if not ev.is_valid():
            self.dropped["invalid"] += 1
            return False
        changed = self._put(ev)
        self._note_relay(url, ev)
        if changed:
            self._changed()
        return changed

    def ingest_by_relay(self, by_relay: Mapping[str, Iterable[Event] | None], *, loaded: bool = True) -> bool:
        """A start-up query's answer per relay: like :meth:`ingest_many`, remembering who served what."""
        events = [(url, ev) for url, evs in by_relay.items() for ev in evs or ()]
        changed = self.ingest_many((ev for _, ev in events), loaded=loaded)
        for url, ev in events:
            self._note_relay(url, ev)
        return changed

    def _note_relay(self, url: str | None, ev: Event) -> None:
        cached = self._notes.get(ev.id) or self._replaceable.get(ev.kind)
        if url and cached is not None and cached.id == ev.id:
            self._served.setdefault(ev.id, set()).add(url)
        live = {e.id for e in (*self._replaceable.values(), *self._notes.values())}
        for eid in [e for e in self._served if e not in live]:  # bounded by the cache itself
            del self._served[eid]

    def source_events(self, prefix: str, identity_tool: str | None = None) -> dict[str, SourceEvent]:
        """Provenance of the context sections fed by this cache: tool name -> the event and its relays.

        ``prefix`` is ``nostr_agent`` or ``nostr_admin``; the identity section (``identity_tool``) shows
        the name from the kind 0, so it cites that event; the notes section cites the newest note.
        """
        def source(ev: Event) -> SourceEvent:
            return SourceEvent(ev.id, ev.created_at, tuple(sorted(self._served.get(ev.id, ()))))

        out: dict[str, SourceEvent] = {}
        for kind, suffix in ((METADATA, "profile"), (CONTACTS, "contacts"), (RELAY_LIST, "relays")):
            ev = self._replaceable.get(kind)
            if ev is not None:
                out[f"{prefix}_{suffix}"] = source(ev)
        if identity_tool and METADATA in self._replaceable:
            out[identity_tool] = source(self._replaceable[METADATA])
        notes = self.view().notes
        if notes:
            out[f"{prefix}_notes"] = source(notes[0])
        return out

    def ingest_many(self, events: Iterable[Event], *, loaded: bool = True) -> bool:
        changed = False
        for ev in events:
            if not self._accept(ev):
                continue
            if not ev.is_valid():
                self.dropped["invalid"] += 1
                continue
            changed = self._put(ev) or changed
        if loaded and not self.loaded:
            self.loaded = True
            changed = True
        if changed:
            self._changed()
        return changed

    def event(self, kind: int) -> Event | None:
        return self._replaceable.get(kind)

    def view(self) -> IdentityView:
        if self._view is None:
            notes = sorted(self._notes.values(), key=newest_first)
            self._view = IdentityView(
                pubkey=self.pubkey,
                npub=self.npub,
                profile=profile_of(self._replaceable.get(METADATA)),
                contacts=contacts_of(self._replaceable.get(CONTACTS)),
                relays=relays_of(self._replaceable.get(RELAY_LIST)),
                notes=notes,
                profile_event=self._replaceable.get(METADATA),
                contacts_event=self._replaceable.get(CONTACTS),
                relays_event=self._replaceable.get(RELAY_LIST),
                loaded=self.loaded,
            )
        return self._view


# --- the agent's own kinds 0 / 3 / 10002 from the config ------------------------------------


@dataclass(frozen=True, slots=True)
class OwnIdentityDraft:
    """What the agent should publish: (kind, content, tags) for each kind that differs from the relays."""

    kind: int
    content: str
    tags: tuple[tuple[str, ...], ...] = field(default=())


def desired_profile(current: dict[str, Any], *, name: str, about: str, picture: str) -> dict[str, Any]:
    """The configured fields merged into what the relays hold: a field the config sets wins; every other
    field (nip05, lud16, banner...) is kept; an empty config value never deletes a field."""
    out = dict(current)
    for key, value in (("name", name), ("about", about), ("picture", picture)):
        if value:
            out[key] = value
    return out


def own_identity_drafts(
    cache: IdentityCache,
    *,
    name: str,
    about: str,
    picture: str,
    contacts: Sequence[str],
    relay_urls: Sequence[str],
) -> list[OwnIdentityDraft]:
    """The kinds 0, 3, 10002 to publish: the config's fields merged into the cached (relay) version, only where
    that changes something. Lists only grow: a contact or relay someone added elsewhere is never removed."""
    drafts: list[OwnIdentityDraft] = []
    view = cache.view()
    profile = desired_profile(view.profile, name=name, about=about, picture=picture)
    if profile != view.profile or view.profile_event is None:
        drafts.append(OwnIdentityDraft(METADATA, json.dumps(profile, ensure_ascii=False, sort_keys=True)))
    missing_contacts = [pk for pk in dict.fromkeys(contacts) if pk not in view.contacts]
    if missing_contacts:
        kept = list(view.contacts_event.tags) if view.contacts_event is not None else []
        drafts.append(OwnIdentityDraft(CONTACTS, view.contacts_event.content if view.contacts_event else "",
                                       tuple(tuple(t) for t in kept) + tuple(("p", pk) for pk in missing_contacts)))
    known_relays = {url for url, _ in view.relays}
    missing_relays = [url for url in dict.fromkeys(relay_urls) if url not in known_relays]
    if missing_relays:
        kept = list(view.relays_event.tags) if view.relays_event is not None else []
        drafts.append(OwnIdentityDraft(RELAY_LIST, "",
                                       tuple(tuple(t) for t in kept) + tuple(("r", url) for url in missing_relays)))
    return drafts


# --- identity drift: the relays hold a version this device did not publish ------------------------------


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field the config would change in the relays' version ("" = absent)."""

    field: str
    relays: str
    config: str


@dataclass(frozen=True, slots=True)
class KindDrift:
    """The relays' version of one kind, published elsewhere, and what republishing the config over it changes."""

    kind: int
    event: Event
    changes: tuple[FieldChange, ...]


def draft_changes(view: IdentityView, draft: OwnIdentityDraft) -> tuple[FieldChange, ...]:
    """Field by field, what ``draft`` changes in the cached version of its kind."""
    if draft.kind == METADATA:
        current = view.profile
        try:
            wanted = json.loads(draft.content)
        except ValueError:
            wanted = {}
        return tuple(FieldChange(key, _shown(current.get(key)), _shown(wanted.get(key)))
                     for key in sorted(set(current) | set(wanted)) if current.get(key) != wanted.get(key))
    field_name, letter, old = ("contacts", "p", view.contacts) if draft.kind == CONTACTS else \
        ("relays", "r", [url for url, _ in view.relays])
    added = [t[1] for t in draft.tags if len(t) >= 2 and t[0] == letter and t[1] not in old]
    return tuple(FieldChange(field_name, "", f"+ {value}") for value in added)


def _shown(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def identity_drift(view: IdentityView, drafts: Sequence[OwnIdentityDraft],
                   known_ids: Iterable[str]) -> list[KindDrift]:
    """Kinds whose relay version this device neither published nor adopted, and that the config would change.

    A kind the relays do not hold is no drift (the config's first publish); a foreign version the config
    would not change needs no word either.
    """
    known = set(known_ids)
    events = {METADATA: view.profile_event, CONTACTS: view.contacts_event, RELAY_LIST: view.relays_event}
    drifts = []
    for draft in drafts:
        ev = events.get(draft.kind)
        if ev is None or ev.id in known:
            continue
        changes = draft_changes(view, draft)
        if changes:
            drifts.append(KindDrift(draft.kind, ev, changes))
    return drifts
