"""The agent's public identity and the admin's: fetched into the caches at start, followed live.

The relays are the reality for the agent's kinds 0 / 3 / 10002; ``config.toml`` is the intent for the first
publish. A kind is published from the config only where the relays hold nothing, or hold the version this
device published (or adopted) last — and then as the config's fields merged into it, never deleting a field.
A version published elsewhere that the config would change is *identity drift*: nothing is published; the
user sees a field-by-field diff and chooses :meth:`IdentityService.adopt` or
:meth:`IdentityService.republish_merged`. The ids this device published or adopted are kept in state.toml.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path

from ..agent.background import BackgroundTasks
from ..agent.documents.keys import DocumentKey
from ..agent.documents.saving import DocumentSaves, Value
from ..agent.documents.store import DocumentStore
from ..agent.documents.versions import SaveResult
from ..agent.identity.cache import (
    IdentityCache,
    KindDrift,
    OwnIdentityDraft,
    SelfContextSnapshot,
    identity_drift,
    own_identity_drafts,
    pubkey_hex,
)
from ..agent.identity.codecs import TagList
from ..config import Config
from ..config_file import config_error
from ..errors import AgentError
from ..nostr.kinds import CONTACTS, METADATA, RELAY_LIST
from ..nostr.nip19 import encode_npub
from ..nostr.pool import PoolSubscription, RelayPool
from ..nostr.results import PublishOutcome
from . import state
from .identity_caches import IdentityCaches

WHAT = {METADATA: "profile", CONTACTS: "contact list", RELAY_LIST: "relay list"}
KNOWN_KEY = "identity_known"  # state.toml: {kind: id} of the versions this device published or adopted
INTENT_KEY = "identity_intent"  # state.toml: {kind: the config's fields for it} when published or adopted
DOCUMENT = {METADATA: DocumentKey.PROFILE, CONTACTS: DocumentKey.CONTACTS, RELAY_LIST: DocumentKey.RELAYS}


class IdentityService:
    """The agent's identity and the admin's: ``identities`` (the caches; the admin's replaced by
    :meth:`switch_admin`) fetched and followed through ``pool``; the agent's own kinds saved through ``saves`` (the
    one save path) and read from ``store``; background publishes in ``tasks``; live subscriptions closed by
    ``closers`` at stop."""

    def __init__(self, identities: IdentityCaches, *, pool: RelayPool, store: DocumentStore, saves: DocumentSaves,
                 tasks: BackgroundTasks, closers: contextlib.AsyncExitStack, config: Config,
                 clock: Callable[[], float], warn: Callable[[str], None], data_dir: Path | None = None,
                 emit_changed: Callable[[], None] | None = None,
                 emit_admin_changed: Callable[[], None] | None = None) -> None:
        self._identities, self._pool, self._store, self._saves = identities, pool, store, saves
        self._tasks, self._closers = tasks, closers
        self._config, self._clock, self._warn = config, clock, warn
        self._data_dir = data_dir
        self._emit_changed = emit_changed or (lambda: None)
        self._emit_admin_changed = emit_admin_changed or (lambda: None)
        self._admin_sub: PoolSubscription | None = None  # the admin's live subscription (replaced with the admin)
        saved = state.read_state(data_dir) if data_dir is not None else {}
        self._known = _str_map(saved.get(KNOWN_KEY))
        self._intent = _str_map(saved.get(INTENT_KEY))
        self._contacts = self._configured_contacts()  # checked once: a bad entry is one warning, not one per redraw

    @property
    def agent_pubkey(self) -> str:
        return self._identities.agent.pubkey

    @property
    def agent_npub(self) -> str:
        return encode_npub(self._identities.agent.pubkey)

    def snapshot(self) -> SelfContextSnapshot:
        admin = self._identities.admin
        return SelfContextSnapshot(self._identities.agent.view(), admin.view() if admin is not None else None)

    async def load(self, cache: IdentityCache) -> None:
        try:
            by_relay = await self._pool.query_by_relay(cache.filters(), timeout=self._config.relays.timeout_s)
        except Exception as exc:  # relay trouble never raises out of start()
            self._warn(f"could not fetch {cache.npub[:16]}…'s profile: {exc}")
            by_relay = {}
        # ``loaded`` only when some relay answered: publishing our profile over one we could not read
        # would drop fields set elsewhere.
        answered = any(events is not None for events in by_relay.values())
        cache.ingest_many([ev for events in by_relay.values() for ev in events or ()], loaded=answered)

    def follow(self) -> None:
        """Live subscriptions: other devices' profile changes reach the caches."""
        agent, admin = self._identities.agent, self._identities.admin
        sub = self._pool.subscribe(agent.filters(), agent.ingest)
        self._closers.push_async_callback(sub.close)
        if admin is not None:
            self._admin_sub = self._pool.subscribe(admin.filters(), admin.ingest)
        self._closers.push_async_callback(self._close_admin_sub)

    async def _close_admin_sub(self) -> None:
        sub, self._admin_sub = self._admin_sub, None
        if sub is not None:
            await sub.close()

    async def switch_admin(self, pubkey: str | None) -> None:
        """``[admin]`` changed while running: the admin's context is the new admin's from now on (a new cache,
        fetched and followed; the old one's subscription closed), never the previous admin's under the new name."""
        identities = self._identities
        if (identities.admin.pubkey if identities.admin is not None else None) == pubkey:
            return
        await self._close_admin_sub()
        cache = None
        if pubkey is not None:
            cache = IdentityCache(pubkey, clock=self._clock)
            cache.add_listener(self._emit_admin_changed)
        identities.replace_admin(cache)  # the tools' context follows (IdentityCaches' on_admin)
        self._emit_admin_changed()
        if cache is not None:
            await self.load(cache)
            if identities.admin is cache:  # not replaced again meanwhile
                self._admin_sub = self._pool.subscribe(cache.filters(), cache.ingest)

    # --- drift -----------------------------------------------------------------------------------
    def drafts(self) -> list[OwnIdentityDraft]:
        """The config's fields merged into the relays' versions, where that changes something. While
        ``$DIDACTYL_RELAYS`` overrides the relays for this run, the relay list is left alone: this run does not see
        the relays that hold it, and an override is never the agent's public list."""
        cfg = self._config
        drafts = own_identity_drafts(self._identities.agent, name=cfg.agent.name, about=cfg.agent.about,
                                     picture=cfg.agent.picture, contacts=self._contacts, relay_urls=cfg.relays.urls)
        return drafts if cfg.relays_override is None else [d for d in drafts if d.kind != RELAY_LIST]

    def _configured_contacts(self) -> list[str]:
        cfg = self._config
        try:
            return [pubkey_hex(pk) for pk in cfg.agent.contacts]
        except ValueError as exc:
            self._warn(config_error(cfg.path, "agent", "contacts", f"{exc}; contacts not published").message)
            return []

    def _loaded(self) -> bool:
        """Some relay answered for the agent's profile, contacts and relay list (publishing over versions we
        could not read would drop fields set elsewhere)."""
        return all(self._store.snapshot(key).loaded for key in DOCUMENT.values())

    def drift(self) -> list[KindDrift]:
        """Kinds the relays hold in a version published elsewhere that the config would change."""
        if not self._loaded():
            return []
        return identity_drift(self._identities.agent.view(), self.drafts(), self._known.values())

    def _config_intent(self, kind: int) -> str:
        """The config's fields for one kind, as recorded when published or adopted (a change means new intent)."""
        agent = self._config.agent
        if kind == METADATA:
            return json.dumps([agent.name, agent.about, agent.picture], ensure_ascii=False)
        if kind == CONTACTS:
            return json.dumps(sorted(self._contacts))
        return json.dumps(sorted(self._config.relays.urls))

    def _may_publish(self, draft: OwnIdentityDraft) -> bool:
        """Config's first publish (the relays hold nothing), or the config changed since this device published or
        adopted the relays' version. Never over a version published elsewhere (drift)."""
        snap = self._store.snapshot(DOCUMENT[draft.kind])
        if snap.unreadable is not None:
            return False  # a newer version that does not read: never published over from the config
        ev = self._identities.agent.event(draft.kind)
        if ev is None:
            return True
        return ev.id in self._known.values() and self._intent.get(str(draft.kind)) != self._config_intent(draft.kind)

    # --- publishing ----------------------------------------------------------------------------------
    async def publish_own(self, *, skip_kinds: frozenset[int] = frozenset()) -> None:
        """At start: the config's first publish, or its changes over our own last version; never over drift.
        The cache shows it at once; the relays get it in the background. ``skip_kinds``: kinds declared in
        ``[[agent.startup_events]]``, which replace the ones built from ``[agent]``."""
        if not self._loaded():
            return
        drifted = {d.kind for d in self.drift()}
        own = [d for d in self.drafts() if self._may_publish(d) and d.kind not in skip_kinds]
        if own:
            adopted = [asyncio.Event() for _ in own]
            self._tasks.spawn(self._publish(own, adopted))
            for event in adopted:  # signed and in use here: the relays get it in the background
                await event.wait()
        if drifted:
            self._emit_changed()

    async def republish_merged(self, *, only_drifted: bool = True) -> dict[int, PublishOutcome]:
        """The config's fields merged into the relays' drifted versions (other fields kept), published;
        with ``only_drifted=False`` every kind the config would change (``didactyl identity publish``)."""
        drifted = {d.kind for d in self.drift()}
        outcomes = await self._publish([d for d in self.drafts() if d.kind in drifted or not only_drifted])
        self._emit_changed()
        return outcomes

    async def adopt(self) -> list[int]:
        """Take the relays' versions as ours: nothing is published, the drift is no longer reported."""
        drifts = self.drift()
        await self._remember({d.kind: d.event.id for d in drifts})  # with the config's intent: not re-sent
        self._emit_changed()
        return [d.kind for d in drifts]

    async def _publish(self, drafts: list[OwnIdentityDraft],
                       adopted: list[asyncio.Event] | None = None) -> dict[int, PublishOutcome]:
        """Each draft saved as a new version of its document (the one save path: dated after the version it
        merges into, outbox, every relay, history), the documents side by side."""
        outcomes: dict[int, PublishOutcome] = {}
        published: dict[int, str] = {}

        async def save(draft: OwnIdentityDraft, signed: asyncio.Event | None) -> SaveResult | None:
            try:
                return await self._saves.save(DOCUMENT[draft.kind], Value(_value(draft)), adopted=signed)
            except AgentError as exc:  # a newer version is known, or one dated too far ahead: nothing published
                self._warn(f"the agent's {WHAT[draft.kind]} was not published: {exc.message}")
                return None

        results = await asyncio.gather(*(save(d, adopted[n] if adopted else None) for n, d in enumerate(drafts)))
        for draft, result in zip(drafts, results, strict=True):
            if result is None:
                continue
            outcomes[draft.kind] = result.outcome
            if result.any_accepted:
                published[draft.kind] = result.event_id
            elif result.outcome.results:
                self._warn(f"the agent's {WHAT[draft.kind]} was not published: {result.outcome.summary()}")
        await self._remember(published)
        return outcomes

    async def _remember(self, ids: dict[int, str]) -> None:
        if not ids:
            return
        self._known.update({str(kind): event_id for kind, event_id in ids.items()})
        self._intent.update({str(kind): self._config_intent(kind) for kind in ids})
        if self._data_dir is not None:
            try:
                await asyncio.to_thread(_record, self._data_dir, dict(self._known), dict(self._intent))
            except Exception as exc:  # a preference file must not fail a publish
                self._warn(f"could not record the published identity: {exc}")


def _value(draft: OwnIdentityDraft) -> object:
    """A draft as its document's value."""
    if draft.kind == METADATA:
        return json.loads(draft.content)
    return TagList(tuple(tuple(t) for t in draft.tags), draft.content)


def _str_map(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _record(data_dir: Path, known: dict[str, str], intent: dict[str, str]) -> None:
    state.remember(data_dir, KNOWN_KEY, known)
    state.remember(data_dir, INTENT_KEY, intent)
