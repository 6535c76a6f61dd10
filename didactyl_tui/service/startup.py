"""``[[agent.startup_events]]``: the events the config says the agent should have, published once at start.

:func:`plan_startup_events` (agent/identity/startup_events.py) compares the declarations with what the relays hold
(each published event carries its declaration's digest), so nothing is posted twice across restarts; a
declared replaceable kind (0, 3, 10002) replaces the one the identity service builds from ``[agent]``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..agent.identity.startup_events import (
    StartupEvent,
    check_intents,
    plan_startup_events,
    startup_event,
    startup_filters,
)
from ..config import Config
from ..config_file import config_error
from ..errors import AgentError
from ..nostr.kinds import RELAY_LIST
from ..nostr.replaceable import newest
from .runtime import Runtime


def startup_intents(config: Config) -> list[StartupEvent]:
    """The declared events, checked (a bad one is a ConfigError naming ``[agent] startup_events``). A declared
    relay list (kind 10002) waits while ``$DIDACTYL_RELAYS`` overrides the relays: this run does not see the
    relays that hold the agent's list."""
    try:
        intents = check_intents(startup_event(e.kind, e.content, e.tags, where=f"startup event #{n}")
                                for n, e in enumerate(config.agent.startup_events, 1))
    except AgentError as exc:
        raise config_error(config.path, "agent", "startup_events", exc.message) from None
    return intents if config.relays_override is None else [i for i in intents if i.kind != RELAY_LIST]


async def publish_startup_events(rt: Runtime, intents: list[StartupEvent], clock: Callable[[], float],
                                 warn: Callable[[str], None]) -> None:
    """Publish the declared events the relays do not have yet (never twice: see agent.startup_events)."""
    me = rt.signer.public_key
    try:
        by_relay = await rt.pool.query_by_relay(startup_filters(me, intents), timeout=rt.timeout_s)
    except Exception as exc:  # relay trouble never raises out of start()
        warn(f"startup events not published: {exc}")
        return
    if not any(events is not None for events in by_relay.values()):
        return  # no relay answered: we cannot tell what is already there, so nothing is posted twice
    existing = [ev for events in by_relay.values() for ev in events or ()]
    for intent in plan_startup_events(intents, existing, me):
        current = newest(ev for ev in existing if ev.kind == intent.kind and ev.pubkey == me)
        ev = await intent.sign_with(rt.signer, created_at=max(int(clock()), current.created_at + 1 if current else 0))
        rt.identities.agent.ingest(None, ev)
        outcome = await rt.pool.publish(ev, timeout=rt.timeout_s)
        if outcome.results and not outcome.any_accepted:
            warn(f"the agent's kind {ev.kind} startup event was not published: {outcome.summary()}")
