"""The relays in use as the views show them: their addresses and connection states, the embedded one, what each
relay client dropped (bad signatures, floods...) and what the document store and identity caches refused."""

from __future__ import annotations

from ..nostr.results import ConnectionState
from .runtime import Runtime


class RelayService:
    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    @property
    def urls(self) -> list[str]:
        return self._rt.pool.urls

    @property
    def embedded_url(self) -> str | None:
        """The shared embedded relay's address (it may come back on another port), or None without one."""
        return self._rt.embedded_relay_url

    def states(self) -> dict[str, ConnectionState]:
        return self._rt.pool.states()

    def dropped_counts(self) -> dict[str, dict[str, int]]:
        """Per relay, the events its client dropped, by reason."""
        return {url: dict(counter) for url, counter in self._rt.pool.dropped().items()}

    def filtered_counts(self) -> dict[str, int]:
        """Events the document store and identity caches refused (foreign author, far future, undecryptable...)."""
        total: dict[str, int] = {}
        rt = self._rt
        for counter in [*(c.dropped for c in rt.caches), rt.store.dropped]:
            for reason, n in counter.items():
                total[reason] = total.get(reason, 0) + n
        return total
