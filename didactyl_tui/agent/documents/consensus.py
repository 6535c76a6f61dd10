"""Relay consensus: which version of a document each relay holds, compared with the newest known. Pure: the
publisher asks the relays (``relay_versions``, ``served_by``) and brings the lagging ones up to date
(``reconcile``); the sync runs the checks (``DocumentSync.check``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...nostr.event import Event
from ...nostr.replaceable import newest
from ...nostr.results import PublishOutcome
from .keys import DocumentKey


@dataclass(frozen=True, slots=True)
class RelayHolding:
    """What one relay holds for one document's address."""

    url: str
    event_id: str | None  # None: the relay holds no version (or did not answer)
    created_at: int | None
    reachable: bool  # answered the query completely (EOSE)
    current: bool  # holds the newest version known


@dataclass(frozen=True, slots=True)
class ConsensusCheck:
    """Which version of one document each relay holds, and what bringing the lagging ones up to date gave."""

    type: DocumentKey
    newest_event_id: str | None
    newest_created_at: int | None
    holdings: tuple[RelayHolding, ...]
    outcome: PublishOutcome | None
    # Relays that acknowledged the newest version (OK true) but do not serve it when asked by id.
    unserved: tuple[str, ...] = ()


def holdings_of(by_relay: Mapping[str, Any], urls: Iterable[str], author: str, kind: int,
                d: str) -> tuple[Event | None, list[RelayHolding]]:
    """The newest version of (kind, author, d) any relay gave, and what each of ``urls`` holds (``by_relay``: each
    relay's answer to the query, None when it did not answer completely)."""
    urls = list(urls)
    held: dict[str, Event | None] = {}
    reachable: dict[str, bool] = {}
    for url in urls:
        events = by_relay.get(url)
        reachable[url] = events is not None
        held[url] = newest(e for e in (events or [])
                           if e.pubkey == author and e.kind == kind and (not d or e.d_tag == d))
    best = newest(e for e in held.values() if e is not None)
    holdings = []
    for url in urls:
        ev = held[url]
        holdings.append(
            RelayHolding(
                url,
                ev.id if ev else None,
                ev.created_at if ev else None,
                reachable[url],
                best is not None and ev is not None and ev.id == best.id,
            )
        )
    return best, holdings


def acknowledged_not_shown(holdings: Iterable[RelayHolding], newest_id: str, acked: set[str]) -> list[str]:
    """Reachable relays that said OK to ``newest_id`` but did not show it when asked for the document: to be read
    back by id (delivery verified, not assumed)."""
    holdings = list(holdings)
    showing = {h.url for h in holdings if h.event_id == newest_id}
    return [h.url for h in holdings if h.reachable and h.url in acked and h.url not in showing]
