"""Where the embedded relay listens, against where the config asks (``[relays] embedded_host`` and
``embedded_port``): one line for the person when they differ, saying why and what to do.

The relay moves to a changed address only while no client is connected (nostr/embedded_relay/process.py), and a
port another program holds sends it to a free one; ``relay.lock`` says which (``AskedAddress``). The launcher that
learns it first says it (:attr:`SharedRelay.news`); ``didactyl relay status`` always does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import Config

if TYPE_CHECKING:  # the relay's code loads only when a relay is wanted
    from ..nostr.embedded_relay.shared import SharedRelay


def asked_address(config: Config) -> tuple[str, int]:
    """Where the config asks the embedded relay to listen."""
    return config.relays.embedded_host, config.relays.embedded_port


def _where(host: str, port: int) -> str:
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else f"{host} (any port)"


def where_asked(config: Config) -> str:
    """Where the config asks the embedded relay to listen, as a person reads it (``127.0.0.1:7447``)."""
    return _where(*asked_address(config))


def address_line(relay: SharedRelay, config: Config) -> str | None:
    """Why the relay does not listen where the config asks, and the fix, in one line; None when it does."""
    from ..nostr.embedded_relay.lockfile import AskedAddress
    from ..nostr.embedded_relay.options import same_host

    host, port = asked_address(config)
    if relay.listens_as_asked(host, port) and relay.asked is not None:
        return None
    asked = relay.asked
    if asked is None:
        if relay.listens_as_asked(host, port):
            return None
        return (f"the embedded relay (pid {relay.pid}, an older didactyl's) runs on {relay.url}, not "
                f"{_where(host, port)} as the config asks, and cannot move: stop it (kill {relay.pid}); it starts "
                "again where the config asks")
    if not (asked.port == port and same_host(asked.host, host)):
        asked = AskedAddress(host, port)  # its answer was to another launcher's address: none for this one yet
    if asked.refused == AskedAddress.TAKEN:
        return (f"port {asked.port} is taken by another program; the embedded relay runs on {relay.url} instead: stop "
                "that program, or set [relays] embedded_port to a free port (0: any) for an address that stays")
    if asked.refused == AskedAddress.CLIENTS:
        return (f"the embedded relay still runs on {relay.url}, not {_where(host, port)} as [relays] embedded_host "
                f"and embedded_port ask: {asked.detail}, and a move would cut them off; it moves when a didactyl "
                "starts with none connected")
    if asked.refused == AskedAddress.UNAVAILABLE:
        return (f"the embedded relay cannot listen on {_where(host, port)} ({asked.detail}) and still runs on "
                f"{relay.url}: set [relays] embedded_host to an address of this machine")
    # Not asked for this address yet (a revival, which uses the relay as it finds it): the next start asks.
    return (f"the embedded relay runs on {relay.url}, not {_where(host, port)} as the config asks: it moves when a "
            "didactyl starts with no client connected")
