"""A pool over N relays: fan-out publish with per-relay verdicts, merged queries, live subscriptions.

Every fan-out runs the relays concurrently in an ``asyncio.TaskGroup`` with a per-relay timeout,
so a slow or dead relay never holds the others up. Query results are deduped by id and
replaceable/addressable events are resolved by NIP-01 here (newest ``created_at``, ties to the
lowest id) — never trusting a relay to have done it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import RelayError
from .event import Event
from .filters import validate_filter
from .keys import SecretKey
from .relay import RelayClient
from .relay_guard import FailedEvents, RecentIds
from .relay_link import StateCallback
from .relay_proof import ProofKey
from .replaceable import resolve
from .results import ConnectionState, PublishOutcome, RelayVerdict, Verdict
from .subscription import QueryResult, Subscription, call_safely

if TYPE_CHECKING:  # only named in annotations: the signer's module (and NIP-44) loads with the agent
    from .signer import Signer

log = logging.getLogger(__name__)


class PoolSubscription:
    """One live subscription on every relay of a pool; each event is delivered once (by id)."""

    def __init__(self, on_event: Callable[[str, Event], object]) -> None:  # what it returns is not used
        self._on_event = on_event
        self._seen = RecentIds()
        self.subscriptions: dict[str, Subscription] = {}

    def _deliver(self, url: str, ev: Event) -> None:
        if ev.id in self._seen:
            return
        self._seen.add(ev.id)
        call_safely(self._on_event, url, ev)

    @property
    def eose_from(self) -> list[str]:
        """Relays that have sent EOSE at least once."""
        return [url for url, sub in self.subscriptions.items() if sub.eose_received]

    async def close(self) -> None:
        for sub in self.subscriptions.values():
            await sub.close()


class RelayPool:
    """Relays by URL (duplicates ignored, order kept). ``client_kwargs`` go to each RelayClient.

    ``proof_keys``: the relays (by URL) that must prove their identity in every handshake — the data dir's own
    embedded relay — and the key each is checked with. The key belongs to the client, so it follows a
    :meth:`retarget`; a connection there that does not prove it is never used.
    """

    def __init__(self, urls: Iterable[str], *, auth_key: SecretKey | Signer | None = None,
                 proof_keys: Mapping[str, ProofKey] | None = None, **client_kwargs: Any) -> None:
        user_on_state: StateCallback | None = client_kwargs.pop("on_state", None)
        # One memory of events that failed verification for all relays: keyed by (id, sig), so a
        # hostile relay cannot use it against a genuine event another relay serves.
        client_kwargs.setdefault("failed_events", FailedEvents())
        self._listeners: list[StateCallback] = [user_on_state] if user_on_state else []
        urls = list(dict.fromkeys(urls))
        proof_keys = dict(proof_keys or {})
        if stray := sorted(set(proof_keys) - set(urls)):  # a key for no relay would check nothing: say so
            raise RelayError(f"a proof key for a relay not in the pool: {', '.join(stray)}")
        self._clients: dict[str, RelayClient] = {
            url: RelayClient(url, auth_key=auth_key, on_state=self._on_state, proof_key=proof_keys.get(url),
                             **client_kwargs)
            for url in urls
        }

    @property
    def urls(self) -> list[str]:
        return list(self._clients)

    def client(self, url: str) -> RelayClient:
        return self._clients[url]

    def retarget(self, old_url: str, new_url: str, *, proof_key: ProofKey | None = None) -> None:
        """The relay known as ``old_url`` now answers on ``new_url`` (same relay, same database): its client
        is kept (subscriptions, unanswered publishes, the key its proof is checked with, unless ``proof_key``
        replaces it) and known by the new URL, in the same place."""
        if old_url == new_url or old_url not in self._clients:
            return
        if new_url in self._clients:
            raise RelayError(f"{new_url} is already in the pool")
        self._clients[old_url].retarget(new_url, proof_key=proof_key)
        self._clients = {(new_url if url == old_url else url): c for url, c in self._clients.items()}

    def _pick(self, urls: Iterable[str] | None) -> list[RelayClient]:
        if urls is None:
            return list(self._clients.values())
        return [self._clients[u] for u in urls if u in self._clients]

    # --- lifecycle and state ----------------------------------------------------------------
    async def start(self) -> None:
        """Start connecting every relay in the background; returns at once."""
        for client in self._clients.values():
            client.start()

    async def wait_connected(self, timeout: float = 5.0, *, all_relays: bool = True) -> bool:
        """Wait until every relay (or, with ``all_relays=False``, any relay) is connected."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        check = all if all_relays else any
        while not check(c.connected for c in self._clients.values()):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def close(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for client in self._clients.values():
                tg.create_task(client.close())

    async def __aenter__(self) -> RelayPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def states(self) -> dict[str, ConnectionState]:
        return {url: c.state for url, c in self._clients.items()}

    def add_state_listener(self, callback: StateCallback) -> None:
        self._listeners.append(callback)

    def remove_state_listener(self, callback: StateCallback) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def _on_state(self, url: str, state: ConnectionState) -> None:
        for callback in list(self._listeners):
            call_safely(callback, url, state)

    def dropped(self) -> dict[str, Counter[str]]:
        """Per relay, how many incoming frames/events were dropped, by reason (copies)."""
        return {url: Counter(c.dropped) for url, c in self._clients.items()}

    # --- publish ----------------------------------------------------------------------------
    async def publish(
        self, event: Event, timeout: float = 5.0, *, urls: Iterable[str] | None = None
    ) -> PublishOutcome:
        """Publish to every relay (or to ``urls``) at once; one verdict per relay."""
        verdicts = await _each(self._pick(urls), lambda client: _guarded_publish(client, event, timeout))
        return PublishOutcome(event.id, verdicts)

    # --- queries ----------------------------------------------------------------------------
    async def query_results(
        self, filters: Sequence[Mapping[str, Any]], timeout: float = 5.0, *, urls: Iterable[str] | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, QueryResult]:
        """Each relay's raw answer (events as the relay sent them, verified, not resolved); ``max_bytes`` bounds
        each relay's answer (:meth:`RelayClient.query_result`)."""
        filters = [validate_filter(f) for f in filters]  # a bad filter is our error, raised once
        return await _each(self._pick(urls), lambda client: _guarded_query(client, filters, timeout, max_bytes))

    async def query_by_relay(
        self, filters: Sequence[Mapping[str, Any]], timeout: float = 5.0
    ) -> dict[str, list[Event] | None]:
        """Per relay, its events for ``filters``; ``None`` when it failed or did not finish in time."""
        results = await self.query_results(filters, timeout)
        return {url: (r.events if r.complete else None) for url, r in results.items()}

    async def query(self, filters: Sequence[Mapping[str, Any]], timeout: float = 5.0) -> list[Event]:
        """Events from all relays, deduped by id, replaceable/addressable resolved, newest first.

        Partial answers (a relay that timed out before EOSE) are still used: every event
        delivered was verified and matched the filters.
        """
        results = await self.query_results(filters, timeout)
        return resolve(ev for r in results.values() for ev in r.events)

    def subscribe(
        self,
        filters: Sequence[Mapping[str, Any]],
        on_event: Callable[[str, Event], object],
        *,
        on_eose: Callable[[str], None] | None = None,
        on_closed: Callable[[str, str], None] | None = None,
        on_dropped: Callable[[str, str], None] | None = None,
    ) -> PoolSubscription:
        """A live subscription on every relay; ``on_event(url, event)`` once per event id;
        ``on_dropped(url, reason)`` for each event a relay sent for it that failed a check."""
        pool_sub = PoolSubscription(on_event)
        for url, client in self._clients.items():
            pool_sub.subscriptions[url] = client.subscribe(
                filters,
                partial(pool_sub._deliver, url),
                on_eose=partial(on_eose, url) if on_eose else None,
                on_closed=partial(on_closed, url) if on_closed else None,
                on_dropped=partial(on_dropped, url) if on_dropped else None,
            )
        return pool_sub


_T = TypeVar("_T")


async def _each(clients: list[RelayClient], call: Callable[[RelayClient], Awaitable[_T]]) -> dict[str, _T]:
    """Run ``call`` on every relay at once; results keyed by URL, in the pool's order."""
    results: dict[str, _T] = {}

    async def one(client: RelayClient) -> None:
        results[client.url] = await call(client)

    async with asyncio.TaskGroup() as tg:
        for client in clients:
            tg.create_task(one(client))
    return {c.url: results[c.url] for c in clients}


async def _guarded_publish(client: RelayClient, event: Event, timeout: float) -> RelayVerdict:
    # The client never raises for relay trouble; this guard keeps one bug from cancelling the
    # whole TaskGroup, and the outer timeout is a last line against anything that hangs.
    try:
        async with asyncio.timeout(timeout + 1.0):
            return await client.publish(event, timeout)
    except TimeoutError:
        return RelayVerdict(client.url, Verdict.TIMEOUT, f"no OK within {timeout:g}s")
    except Exception as exc:
        log.exception("publish to %s failed", client.url)
        return RelayVerdict(client.url, Verdict.NOT_CONNECTED, f"internal error: {exc}")


async def _guarded_query(client: RelayClient, filters: Sequence[Mapping[str, Any]], timeout: float,
                         max_bytes: int | None = None) -> QueryResult:
    try:
        async with asyncio.timeout(timeout + 1.0):
            return await client.query_result(filters, timeout, max_bytes=max_bytes)
    except TimeoutError:
        return QueryResult(client.url, [], False, f"no EOSE within {timeout:g}s")
    except Exception as exc:
        log.exception("query to %s failed", client.url)
        return QueryResult(client.url, [], False, f"internal error: {exc}")
