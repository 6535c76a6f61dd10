"""The soul as a kind 31120 event: the relays are the truth, the config (or soul file) the initial intent.

At start the agent's souls are fetched and :func:`choose_soul` picks the newest that reads and lints clean
(each refused one is a warning naming its event and section). With none on the relays — and some relay
answered, so we know there is none — the initial soul is published once. :meth:`SoulService.publish`
lints before signing and goes through the memory publisher (outbox, every relay, retries; a version older
than one known is refused), like memory and tasks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..agent.soul import SoulTemplate
from ..agent.soul_event import (
    SOUL_D_TAG,
    build_soul_event,
    choose_soul,
    read_soul_event,
    soul_filter,
    soul_from_text,
    soul_refusal,
    soul_to_json,
)
from ..agent.soul_lint import SoulLintError, check_soul
from ..agent.tools.registry import ToolRegistry
from ..errors import AgentError
from ..nostr.event import Event
from ..nostr.kinds import SOUL
from ..nostr.replaceable import is_newer
from ..nostr.results import PublishOutcome
from .chat import ChatService
from .runtime import Runtime


@dataclass(frozen=True, slots=True)
class SoulView:
    """The soul in use and where it came from."""

    template: SoulTemplate
    event_id: str | None  # the kind 31120 it was read from or published as; None: not on the relays
    created_at: int | None
    encrypted: bool

    def to_json_dict(self) -> dict[str, Any]:
        """The ``didactyl soul show --json`` shape: the event and the soul document."""
        return {"event_id": self.event_id, "created_at": self.created_at, "encrypted": self.encrypted,
                "source": self.template.source, "soul": json.loads(soul_to_json(self.template))}


@dataclass(frozen=True, slots=True)
class SoulVersionView:
    """One version of the soul seen here (published by us or read from a relay)."""

    event_id: str
    created_at: int
    origin: str  # "own" (published here) or "relay"
    sections: list[str] | None  # None when it does not read (the problem is in ``problem``)
    problem: str
    current: bool

    def to_json_dict(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "created_at": self.created_at, "origin": self.origin,
                "sections": self.sections, "problem": self.problem, "current": self.current}


def read_soul_text(source: str, text: str) -> SoulTemplate:
    """A soul document (``didactyl-soul/1`` JSON) or a soul file in the original list format; SoulEventError
    naming ``source`` and the section when it does not parse (linting comes at publish)."""
    return soul_from_text(text, source)


MAX_JUDGED = 256  # soul ids remembered as already judged (only the agent's key can sign one)


class SoulService:
    def __init__(self, rt: Runtime, chat: ChatService, initial: SoulTemplate, registry: ToolRegistry,
                 clock: Callable[[], float], warn: Callable[[str], None]) -> None:
        self._rt, self._chat, self._initial, self._registry = rt, chat, initial, registry
        self._clock, self._warn = clock, warn
        self._event: Event | None = None
        self._last_created_at = 0  # of the newest version signed or read here (a new one is always newer)
        self._judged: dict[str, None] = {}  # ids of souls already chosen or refused (a refusal is told once)
        # How a signed version goes out: the memory publisher, through service/self_documents.py (versioning).
        self.publish_event: Callable[[Event], Awaitable[PublishOutcome]] = rt.publisher.publish
        # Told of the versions read from the relays (kept in the history; judged there, like memory's).
        self.versions_read: Callable[[list[Event]], Awaitable[None]] = lambda evs: self._record(evs, "remote")

    @property
    def event(self) -> Event | None:
        """The kind 31120 in use (None: the soul is not on the relays yet)."""
        return self._event

    def view(self) -> SoulView:
        ev = self._event
        return SoulView(self._chat.soul, ev.id if ev else None, ev.created_at if ev else None,
                        bool(ev and ("encrypted", "nip44") in ev.tags))

    async def load(self, *, publish_initial: bool = True) -> None:
        """Read the relays' souls and use the newest good one; publish the initial soul if there is none
        (and ``publish_initial``: ``[agent] publish_profile``, the switch for publishing the intent at start)."""
        me = self._rt.key.public_key_hex
        try:
            by_relay = await self._rt.pool.query_by_relay([soul_filter(me)], timeout=self._rt.timeout_s)
        except Exception as exc:  # relay trouble never raises out of start()
            self._warn(f"could not fetch the soul: {exc}")
            by_relay = {}
        events = [ev for evs in by_relay.values() for ev in evs or ()]
        self._judged.update(dict.fromkeys(ev.id for ev in events))
        await self.versions_read([ev for ev in events if ev.pubkey == me and ev.kind == SOUL])
        try:
            choice = choose_soul(self._initial, events, self._rt.key, self._registry)
        except SoulLintError as exc:  # no good soul on the relays and the configured one is bad
            self._warn(f"the configured soul has problems (not published): {exc.message}")
            return
        for warning in choice.warnings:
            self._warn(f"a soul on the relays was refused: {warning}")
        self._chat.soul, self._event = choice.template, choice.event
        if choice.event is not None:
            self._last_created_at = max(self._last_created_at, choice.event.created_at)
        answered = any(evs is not None for evs in by_relay.values())
        if choice.publish_initial and answered and publish_initial:
            self._rt.tasks.spawn(self._publish_quietly(choice.template))

    async def publish(self, template: SoulTemplate, *, encrypt: bool = True,
                      base: str | None = None) -> PublishOutcome:
        """Lint, sign (newer than the soul in use), publish through the outbox; the soul in use from then on.
        ``base``: the version the edit started from (default: the soul in use). Raises SoulLintError naming
        each bad section, AgentError when a newer soul is already known."""
        check_soul(template, self._registry)
        # Claimed before any await: a publish under way (the initial soul at start) is never tied.
        self._last_created_at = max(int(self._clock()), self._last_created_at + 1)
        base = base or (self._event.id if self._event is not None else None)
        # Encrypting and signing off the loop: the UI shares it.
        ev = await asyncio.to_thread(build_soul_event, self._rt.key, template, created_at=self._last_created_at,
                                     encrypt=encrypt, base=base)
        self._judged[ev.id] = None  # its echo from the live subscription is not news
        outcome = await self.publish_event(ev)
        await self._record([ev], "local")
        if self._event is None or ev.created_at >= self._event.created_at:  # a later publish may have won
            self._chat.soul, self._event = template, ev
        return outcome

    async def history(self) -> list[SoulVersionView]:
        """Every version seen here, newest first; each read again to list its sections or say why not."""
        me, key = self._rt.key.public_key_hex, self._rt.key
        versions = await asyncio.to_thread(self._rt.history.versions, SOUL_D_TAG, me)
        current = self._event.id if self._event is not None else None

        def view(v: Any) -> SoulVersionView:
            try:
                names, problem = read_soul_event(v.event, key).names, ""
            except AgentError as exc:
                names, problem = None, exc.message
            origin = "own" if v.origin in ("local", "own") else "relay"  # (older files say own/relay)
            return SoulVersionView(v.event.id, v.event.created_at, origin, names, problem, v.event.id == current)

        return await asyncio.to_thread(lambda: [view(v) for v in versions if v.event.kind == SOUL])

    async def _record(self, events: list[Event], origin: str) -> None:
        """Keep each version in the history file (the memory history's, keyed by ``d = soul``)."""
        def record() -> None:
            for ev in events:
                self._rt.history.record(ev, origin)

        try:
            await asyncio.to_thread(record)
        except AgentError as exc:
            self._warn(f"the soul's history was not recorded: {exc.message}")

    async def _publish_quietly(self, template: SoulTemplate) -> None:
        try:
            await self.publish(template)
        except Exception as exc:
            self._warn(f"the soul was not published: {exc}")

    async def take_newer(self, ev: Event) -> SoulView | None:
        """A soul from the live subscription (the CLI, another device): in use from the next prompt on when it is
        newer than every version known here and reads and lints clean (the rules of the start); a refused one is
        a warning naming the event and section, and the soul in use stays. Returns the new view, or None.
        Decrypting and linting run on a worker thread: the UI shares this loop."""
        me, cur = self._rt.key.public_key_hex, self._event
        if ev.id in self._judged or ev.pubkey != me or ev.kind != SOUL or ev.d_tag != SOUL_D_TAG:
            return None
        self._judged[ev.id] = None
        while len(self._judged) > MAX_JUDGED:
            del self._judged[next(iter(self._judged))]
        if ev.created_at < self._last_created_at or (cur is not None and not is_newer(ev, cur)):
            return None  # older than the soul in use, or than one of ours being published
        self._rt.tasks.spawn(self._record([ev], "relay"))
        try:
            template = await asyncio.to_thread(lambda: check_soul(read_soul_event(ev, self._rt.key), self._registry))
        except AgentError as exc:
            self._warn(f"a newer soul on the relays was refused, the one in use stays: {soul_refusal(ev, exc)}")
            return None
        if ev.created_at < self._last_created_at or (self._event is not None and not is_newer(ev, self._event)):
            return None  # a newer one was taken or published while this one was read
        self._chat.soul, self._event = template, ev
        self._last_created_at = max(self._last_created_at, ev.created_at)
        return self.view()
