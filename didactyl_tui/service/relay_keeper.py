"""Keeps the shared embedded relay reachable while the app runs.

The relay is a process of its own (see docs/embedded-relay.md): it can be stopped or die while the app is
connected. When the pool loses its connection, :class:`EmbeddedRelayKeeper` asks
:func:`ensure_shared_relay` again — which finds a relay another didactyl started meanwhile, or starts one —
with a bounded number of attempts and a growing pause between them. A relay that comes back on another port
(the configured one taken, or port 0) replaces the old URL in the pool; the client keeps its subscriptions
and unanswered publishes and re-sends them there.

Identity (#30): the pool's client of the embedded relay must check the relay's proof in every handshake (the keeper
refuses a pool whose client does not), so after a loss nothing is sent to whatever answers on the old port before
it proves it holds the data dir's key; :func:`ensure_shared_relay` proves the relay it finds the same way. Either
refusal — the client hanging up on an unproven server, a lock file or server the search did not trust — is logged
and said to the user once per loss, never accepted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agent.background import BackgroundTasks
from ..config import Config
from ..errors import RelayError
from ..nostr.pool import RelayPool
from ..nostr.results import ConnectionState
from .events import Listeners
from .relay_address import address_line, asked_address

if TYPE_CHECKING:  # the relay process's code loads only when a relay is wanted
    from ..nostr.embedded_relay.shared import SharedRelay

REVIVE_ATTEMPTS = 5  # per connection loss; then the client's own reconnect loop keeps trying the last URL
REVIVE_FIRST_PAUSE_S = 0.5  # doubled after every failed attempt (0.5, 1, 2, 4: ~7.5 s in all)


class EmbeddedRelayKeeper:
    """Holds the embedded relay in use (``relay``: replaced when it comes back elsewhere) and revives it."""

    def __init__(self, relay: SharedRelay, pool: RelayPool, daemons: BackgroundTasks, config: Config,
                 data_dir: Path, warn: Callable[[str], None], relay_options: Mapping[str, Any] | None = None, *,
                 attempts: int = REVIVE_ATTEMPTS, first_pause_s: float = REVIVE_FIRST_PAUSE_S) -> None:
        if relay.url in pool.urls and pool.client(relay.url).proof_key is None:
            raise RelayError(f"the pool's client of the embedded relay {relay.url} does not check its identity")
        self.relay = relay
        self._pool, self._daemons = pool, daemons
        self._config, self._data_dir, self._warn = config, data_dir, warn
        self._options = dict(relay_options or {})
        self._attempts, self._first_pause_s = attempts, first_pause_s
        self._reviving: asyncio.Task[None] | None = None
        self.revivals = 0  # relays found or started again after a loss (for tests and the status)
        self._refusals_seen = 0  # the client's refusals of unproven servers already looked at
        self._told: set[str] = set()  # what was said since the relay was last connected (said once per loss)
        self.moves: Listeners[str] = Listeners()  # the relay's new address, each time it comes back elsewhere

    def state_changed(self, url: str, state: ConnectionState) -> None:
        """A pool state listener: the embedded relay's connection failed or was lost (or is back)."""
        if url != self.relay.url:
            return
        if state is ConnectionState.CONNECTED:
            self._told.clear()
            return
        if state is not ConnectionState.BACKOFF:
            return
        client = self._pool.client(url) if url in self._pool.urls else None
        # It hung up on a server that did not prove it is our relay: nothing was sent there.
        if client is not None and client.refusals > self._refusals_seen:
            self._refusals_seen = client.refusals
            self._tell(f"the embedded relay's connection was refused: {client.last_error} (another program may "
                       "have taken its port); looking for the relay")
        if self._reviving is None or self._reviving.done():
            self._reviving = self._daemons.spawn(self.revive())

    def _tell(self, message: str) -> None:
        if message not in self._told:
            self._told.add(message)
            self._warn(message)

    async def revive(self) -> None:
        from ..nostr.embedded_relay.shared import ensure_shared_relay

        pause = self._first_pause_s
        last_error = ""
        for attempt in range(self._attempts):
            try:
                relay = await ensure_shared_relay(
                    self._data_dir, *asked_address(self._config),
                    idle_exit_s=self._config.relays.embedded_idle_exit_s, relay_options=self._options)
            except RelayError as exc:
                last_error = exc.message
            else:
                for note in relay.distrusted:  # a lock file or a server it did not trust (logged there)
                    self._tell(f"the embedded relay: {note}")
                self._point_pool_at(relay)
                return
            if attempt + 1 < self._attempts:
                await asyncio.sleep(pause)
                pause *= 2
        self._warn(f"the embedded relay is not available: {last_error}")

    async def take_options(self, options: Mapping[str, Any]) -> None:
        """The relay is asked to enforce ``options`` from now on ([admin] or [dm] allow changed while running: a
        reload in place, no connection dropped); a relay that cannot is said, and keeps its old ones."""
        from ..nostr.embedded_relay.options import digest
        from ..nostr.embedded_relay.shared import ensure_shared_relay

        if dict(options) == self._options:
            return
        self._options = dict(options)
        try:
            relay = await ensure_shared_relay(
                self._data_dir, *asked_address(self._config),
                idle_exit_s=self._config.relays.embedded_idle_exit_s, relay_options=self._options, reconfigure=True,
                move=False)  # connected here: a move would be refused, and its last answer (a taken port) kept
        except RelayError as exc:
            self._warn(f"the embedded relay did not take the config's new allow-list: {exc.message}")
            return
        for note in relay.distrusted:  # a lock file or a server it did not trust (logged there)
            self._tell(f"the embedded relay: {note}")
        if relay.options_digest != digest(self._options):
            self._warn(f"the embedded relay (pid {relay.pid}) did not take the config's new allow-list; see "
                       f"{self._data_dir / 'relay.log'}")
        if relay.url != self.relay.url:
            self._point_pool_at(relay)

    def _point_pool_at(self, relay: SharedRelay) -> None:
        old, pool = self.relay, self._pool
        if old.url not in pool.urls:
            return
        self.revivals += 1
        self.relay = relay
        # The client checks the proof with the data dir's key as the search read it (made anew if it was removed).
        if relay.url == old.url:
            # same address: reconnect now, not after the backoff
            pool.client(old.url).retarget(old.url, proof_key=relay.proof_key)
        else:
            pool.retarget(old.url, relay.url, proof_key=relay.proof_key)
            self.moves.emit(relay.url)
        line = address_line(relay, self._config)
        if line and relay.news:
            self._warn(line)
