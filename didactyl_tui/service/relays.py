"""The relays in use as the views show them: their addresses and connection states, the embedded one, what each
relay client dropped (bad signatures, floods...) and what the document store and identity caches refused."""

from __future__ import annotations

from ..agent.documents.store import DocumentStore
from ..nostr.pool import RelayPool
from ..nostr.results import ConnectionState
from .identity_caches import IdentityCaches
from .relay_keeper import EmbeddedRelayKeeper


class RelayService:
    """``keeper``: the embedded relay's keeper (None without one), asked each time, for the relay may come back on
    another port; ``identities``: the caches in use, the admin's replaced when [admin] changes."""

    def __init__(self, *, pool: RelayPool, keeper: EmbeddedRelayKeeper | None, store: DocumentStore,
                 identities: IdentityCaches) -> None:
        self._pool, self._keeper, self._store, self._identities = pool, keeper, store, identities

    @property
    def urls(self) -> list[str]:
        return self._pool.urls

    @property
    def embedded_url(self) -> str | None:
        """The shared embedded relay's address (it may come back on another port), or None without one."""
        return self._keeper.relay.url if self._keeper is not None else None

    def states(self) -> dict[str, ConnectionState]:
        return self._pool.states()

    def dropped_counts(self) -> dict[str, dict[str, int]]:
        """Per relay, the events its client dropped, by reason."""
        return {url: dict(counter) for url, counter in self._pool.dropped().items()}

    def filtered_counts(self) -> dict[str, int]:
        """Events the document store and identity caches refused (foreign author, far future, undecryptable...)."""
        total: dict[str, int] = {}
        for counter in [*(c.dropped for c in self._identities.all()), self._store.dropped]:
            for reason, n in counter.items():
                total[reason] = total.get(reason, 0) + n
        return total
