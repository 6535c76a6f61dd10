"""The agent's public identity and the admin's: fetched into the caches at start, followed live, and the
agent's configured profile, contacts and relay list published where they differ from the relays'."""

from __future__ import annotations

from collections.abc import Callable

from ..agent.identity_cache import IdentityCache, SelfContextSnapshot, own_identity_drafts, pubkey_hex
from ..config import Config, config_error
from ..nostr.event import Event, sign_event
from ..nostr.kinds import CONTACTS, METADATA, RELAY_LIST
from .runtime import Runtime

WHAT = {METADATA: "profile", CONTACTS: "contact list", RELAY_LIST: "relay list"}


class IdentityService:
    def __init__(self, rt: Runtime, config: Config, clock: Callable[[], float], warn: Callable[[str], None]) -> None:
        self._rt, self._config, self._clock, self._warn = rt, config, clock, warn

    def snapshot(self) -> SelfContextSnapshot:
        rt = self._rt
        return SelfContextSnapshot(rt.agent_cache.view(), rt.admin_cache.view() if rt.admin_cache else None)

    async def load(self, cache: IdentityCache) -> None:
        try:
            by_relay = await self._rt.pool.query_by_relay(cache.filters(), timeout=self._config.relays.timeout_s)
        except Exception as exc:  # relay trouble never raises out of start()
            self._warn(f"could not fetch {cache.npub[:16]}…'s profile: {exc}")
            by_relay = {}
        # ``loaded`` only when some relay answered: publishing our profile over one we could not read
        # would drop fields set elsewhere.
        answered = any(events is not None for events in by_relay.values())
        cache.ingest_many([ev for events in by_relay.values() for ev in events or ()], loaded=answered)

    def follow(self) -> None:
        """Live subscriptions: other devices' profile changes reach the caches."""
        rt = self._rt
        for cache in rt.caches:
            sub = rt.pool.subscribe(cache.filters(), cache.ingest)
            rt.closers.push_async_callback(sub.close)

    def publish_own(self) -> None:
        """The cache shows the configured identity at once; the relays get it in the background."""
        if not self._rt.agent_cache.loaded:
            return
        own = self._own_events()  # three small signatures: not worth a thread
        for ev in own:
            self._rt.agent_cache.ingest(None, ev)
        if own:
            self._rt.tasks.spawn(self._publish(own))

    def _own_events(self) -> list[Event]:
        """Kinds 0 / 3 / 10002 from the config, signed, where they differ from what the relays hold."""
        cfg, cache = self._config, self._rt.agent_cache
        try:
            contacts = [pubkey_hex(pk) for pk in cfg.agent.contacts]
        except ValueError as exc:
            self._warn(config_error(cfg.path, "agent", "contacts", f"{exc}; contacts not published").message)
            contacts = []
        drafts = own_identity_drafts(cache, name=cfg.agent.name, about=cfg.agent.about, picture=cfg.agent.picture,
                                     contacts=contacts, relay_urls=cfg.relays.urls)
        events = []
        for draft in drafts:
            current = cache.event(draft.kind)
            created_at = max(int(self._clock()), (current.created_at + 1) if current else 0)
            events.append(sign_event(self._rt.key, kind=draft.kind, content=draft.content, created_at=created_at,
                                     tags=draft.tags))
        return events

    async def _publish(self, events: list[Event]) -> None:
        for ev in events:
            outcome = await self._rt.pool.publish(ev, timeout=self._config.relays.timeout_s)
            if outcome.results and not outcome.any_accepted:
                self._warn(f"the agent's {WHAT[ev.kind]} was not published: {outcome.summary()}")
