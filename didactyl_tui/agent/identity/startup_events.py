"""Startup events: the events the config declares the agent should have (kinds 0, 3, 10002, 1...).

"startup_events are the intent": each declared event is published once, never duplicated on later
starts, and never overwrites what the relays hold unless the intent itself changed. Each published
event carries ``["didactyl-intent", <digest>]``, the digest of its declared kind, content and tags, and
:func:`plan_startup_events` compares the relays' events with the intents:

- a regular event (a kind 1 note): published if no fetched event of the agent carries its digest;
- a replaceable one (0, 3, 10000-19999): published if the agent has none of that kind, or if the
  newest one carries a *different* digest (the config changed since we published it). A newest
  version without a digest was written by someone else (another client): the relays are the truth,
  it stays.

Pure: the caller fetches the agent's events (``startup_filters``), signs and publishes the plan. A note
is looked for among the agent's latest ``notes_limit`` regular events (200): one declared that long ago
and since pushed out would be posted again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import AgentError
from ...nostr.event import Event, Tags, sign_event
from ...nostr.keys import SecretKey
from ...nostr.kinds import is_addressable, is_ephemeral, is_replaceable
from ...nostr.replaceable import newest
from ...nostr.signer import Signer

INTENT_TAG = "didactyl-intent"
MAX_STARTUP_EVENTS = 32
MAX_CONTENT_BYTES = 32_000


@dataclass(frozen=True, slots=True)
class StartupEvent:
    kind: int
    content: str = ""
    tags: Tags = ()

    @property
    def digest(self) -> str:
        data = json.dumps([self.kind, self.content, [list(t) for t in self.tags]], ensure_ascii=False,
                          separators=(",", ":"))
        return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def sign(self, sk: SecretKey, *, created_at: int) -> Event:
        return sign_event(sk, kind=self.kind, content=self.content, created_at=created_at, tags=self.event_tags)

    async def sign_with(self, signer: Signer, *, created_at: int) -> Event:
        """:meth:`sign` by the key behind ``signer`` (a remote signer: one round trip)."""
        return await signer.sign_event(kind=self.kind, content=self.content, created_at=created_at,
                                       tags=self.event_tags)

    @property
    def event_tags(self) -> Tags:
        return (*self.tags, (INTENT_TAG, self.digest))


def startup_event(kind: Any, content: Any = "", tags: Any = (), *, where: str = "startup event") -> StartupEvent:
    """Check one declared event (from config); errors name ``where``."""
    if isinstance(kind, bool) or not isinstance(kind, int) or not 0 <= kind <= 65535:
        raise AgentError(f"{where}: kind must be an integer in 0..65535", "Startup events")
    if is_ephemeral(kind) or is_addressable(kind):
        raise AgentError(f"{where}: kind {kind} is ephemeral or addressable; declare regular or replaceable kinds",
                         "Startup events")
    if not isinstance(content, str) or len(content.encode("utf-8", "surrogatepass")) > MAX_CONTENT_BYTES:
        raise AgentError(f"{where}: content must be text of at most {MAX_CONTENT_BYTES:,} bytes", "Startup events")
    if not isinstance(tags, Sequence) or isinstance(tags, str) or not all(
            isinstance(t, Sequence) and not isinstance(t, str) and t and all(isinstance(x, str) for x in t)
            for t in tags):
        raise AgentError(f"{where}: tags must be a list of non-empty lists of strings", "Startup events")
    if any(t[0] == INTENT_TAG for t in tags):
        raise AgentError(f"{where}: the {INTENT_TAG!r} tag is added by didactyl itself", "Startup events")
    if kind == 0:
        try:
            profile = json.loads(content)
        except ValueError:
            profile = None
        if not isinstance(profile, Mapping):
            raise AgentError(f"{where}: a kind 0 profile's content must be a JSON object", "Startup events")
    return StartupEvent(kind, content, tuple(tuple(t) for t in tags))


def check_intents(intents: Iterable[StartupEvent]) -> list[StartupEvent]:
    items = list(intents)
    if len(items) > MAX_STARTUP_EVENTS:
        raise AgentError(f"at most {MAX_STARTUP_EVENTS} startup events, not {len(items)}", "Startup events")
    kinds = [i.kind for i in items if is_replaceable(i.kind)]
    doubled = sorted({k for k in kinds if kinds.count(k) > 1})
    if doubled:
        raise AgentError(f"kind {doubled[0]} is replaceable: declare it once, not {kinds.count(doubled[0])} times",
                         "Startup events")
    return items


def startup_filters(pubkey: str, intents: Iterable[StartupEvent], *, notes_limit: int = 200) -> list[dict[str, Any]]:
    """What to fetch before planning: the agent's replaceable kinds and its recent regular events."""
    items = list(intents)
    replaceable = sorted({i.kind for i in items if is_replaceable(i.kind)})
    regular = sorted({i.kind for i in items if not is_replaceable(i.kind)})
    out: list[dict[str, Any]] = []
    if replaceable:
        out.append({"authors": [pubkey], "kinds": replaceable})
    if regular:
        out.append({"authors": [pubkey], "kinds": regular, "limit": notes_limit})
    return out


def plan_startup_events(intents: Iterable[StartupEvent], existing: Iterable[Event], pubkey: str) -> list[StartupEvent]:
    """The intents still to publish, in declared order (see the module doc for the rules)."""
    items = check_intents(intents)
    mine = [ev for ev in existing if ev.pubkey == pubkey]
    seen_digests = {d for ev in mine for d in ev.tag_values(INTENT_TAG)}
    todo: list[StartupEvent] = []
    for intent in items:
        if not is_replaceable(intent.kind):
            if intent.digest not in seen_digests:
                todo.append(intent)
            continue
        current = newest(ev for ev in mine if ev.kind == intent.kind)
        if current is None:
            todo.append(intent)
            continue
        marks = current.tag_values(INTENT_TAG)
        if marks and intent.digest not in marks:
            todo.append(intent)
    return todo
