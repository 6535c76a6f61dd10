"""An agent that runs elsewhere, as ``attach`` reaches it: its address (NIP-19 ``nprofile``: its key and the relays
it reads its direct messages on, what ``didactyl serve`` prints), and the relays found for it before anything is sent.

- :func:`parse_agent` reads what the person gave (``[attach] agent``: an nprofile, npub or hex key; ``[attach]
  relays`` and ``--relay``): the key and the relays named with it.
- :func:`find_agent_relays` asks those relays, and this app's own, for the agent's kind 10050 (where it reads gift
  wraps, NIP-17), else the read relays of its kind 10002 (NIP-65), signed by the agent: its messages go there and its
  replies are read there. Without either, the relays named with the address are used. With none at all, nothing is
  sent, and the reason says what to give.
- :func:`attach_command` is the line ``serve`` prints: ``didactyl attach nprofile1… [--invite SECRET]``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..agent.identity.cache import pubkey_hex, relays_of
from ..config_file import relay_url_problem
from ..errors import DidactylError
from ..nostr.event import Event
from ..nostr.kinds import DM_RELAY_LIST, RELAY_LIST
from ..nostr.nip17 import MAX_DM_RELAYS, dm_relays_of
from ..nostr.nip19 import decode_nprofile, encode_nprofile
from ..nostr.pool import RelayPool

MAX_HINTS = 8  # relays named with an address that are used (an nprofile may carry any number)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True, slots=True)
class AgentAddress:
    pubkey: str  # hex
    hints: tuple[str, ...] = ()  # relays named with it (valid ws:// or wss:// URLs)
    ignored: tuple[str, ...] = ()  # what was named but is not a usable relay URL (said, not used)


@dataclass(frozen=True, slots=True)
class AgentRelays:
    """Where the agent reads its direct messages: where attach sends, and reads the replies."""

    urls: tuple[str, ...] = ()
    source: str = ""  # how they were found, for the person
    asked: tuple[str, ...] = ()  # the relays asked for its lists

    def problem(self) -> str:
        """Why nothing can be sent ("" when relays are known)."""
        if self.urls:
            return ""
        where = f" on {', '.join(self.asked)}" if self.asked else ""
        return (f"no relay of the agent's is known (its address names none; no relay list of its{where}): attach "
                "with the nprofile `didactyl serve` prints, or add --relay URL")


def parse_agent(text: str, extra: Sequence[str] = ()) -> AgentAddress:
    """The agent's key and the relays named with it; ValueError saying what is wrong with the key."""
    value = text.strip()
    named: list[str] = []
    if value.lower().startswith("nprofile1"):
        try:
            pointer = decode_nprofile(value)
        except DidactylError as exc:
            raise ValueError(f"{value[:30]!r}… is not a valid nprofile ({exc.message})") from None
        pubkey, named = pointer.pubkey, list(pointer.relays)
    else:
        pubkey = pubkey_hex(value)
    hints: list[str] = []
    ignored: list[str] = []
    for url in [*named, *extra]:
        url = url.strip()
        if relay_url_problem(url) is not None:
            ignored.append(url[:100])
        elif url not in hints and len(hints) < MAX_HINTS:
            hints.append(url)
    return AgentAddress(pubkey, tuple(hints), tuple(ignored))


def attach_command(pubkey: str, relays: Sequence[str], invitation: str | None = None) -> str:
    """The one command that attaches to this agent from anywhere that reaches ``relays``."""
    line = f"didactyl attach {encode_nprofile(pubkey, list(relays)[:MAX_DM_RELAYS])}"
    return f"{line} --invite {invitation}" if invitation else line


def is_loopback(url: str) -> bool:
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def read_relays(event: Event | None) -> list[str]:
    """The relays a kind 10002 says its author reads (NIP-65: no marker, or ``read``)."""
    urls = [url.strip() for url, marker in relays_of(event) if marker in ("", "read")]
    return [u for u in dict.fromkeys(urls) if relay_url_problem(u) is None][:MAX_DM_RELAYS]


async def find_agent_relays(address: AgentAddress, also: Sequence[str], *, timeout: float,
                            open_pool: Callable[[list[str]], contextlib.AbstractAsyncContextManager[RelayPool]]
                            = RelayPool) -> AgentRelays:
    """Where the agent reads its direct messages (see the module doc); bounded by ``timeout`` (one query)."""
    asked = list(dict.fromkeys([*address.hints, *also]))[:2 * MAX_HINTS]
    lists: dict[int, Event] = {}
    answered: list[str] = []
    if asked:
        with contextlib.suppress(DidactylError, OSError):
            async with open_pool(asked) as pool:
                found = await pool.query_results([{"kinds": [DM_RELAY_LIST, RELAY_LIST],
                                                   "authors": [address.pubkey]}], timeout)
            for url, result in found.items():
                if result.events:
                    answered.append(url)
                for ev in result.events:
                    if ev.pubkey == address.pubkey and (ev.kind not in lists or _newer(ev, lists[ev.kind])):
                        lists[ev.kind] = ev
    where = f" on {', '.join(answered[:3])}" if answered else ""
    dm = dm_relays_of(lists.get(DM_RELAY_LIST))
    if dm:
        return AgentRelays(tuple(dm), f"its relay list for direct messages (kind 10050){where}", tuple(asked))
    read = read_relays(lists.get(RELAY_LIST))
    if read:
        return AgentRelays(tuple(read), f"the read relays of its relay list (kind 10002){where}", tuple(asked))
    if address.hints:
        return AgentRelays(address.hints, "the relays its address names", tuple(asked))
    return AgentRelays((), "", tuple(asked))


def _newer(a: Event, b: Event) -> bool:
    return (a.created_at, b.id) > (b.created_at, a.id)
