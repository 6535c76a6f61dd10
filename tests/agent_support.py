"""Helpers for the agent-core tests: signed events, a store on real relays, waiting for a condition."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from didactyl_tui.agent.identity_cache import IdentityCache
from didactyl_tui.agent.memory.store import MemoryStore, MemoryType
from didactyl_tui.agent.tools.context import AgentToolContext
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool

AGENT_KEY = SecretKey.from_hex("7f" * 32)
ADMIN_KEY = SecretKey.from_hex("3c" * 32)
OTHER_KEY = SecretKey.from_hex("5a" * 32)
LIMITS = {MemoryType.SHORT_TERM: 8000, MemoryType.LONG_TERM: 32000}
NOW = 1_750_000_000


def memory_event(key: SecretKey, content: str, created_at: int, d: str = "short_term_memory",
                 *, encrypt_to: SecretKey | None = None, kind: int = 30078, prev: str | None = None) -> Event:
    """A memory version as another device (or a stranger) would publish it (``prev``: its base, as didactyl
    tags it; None: untagged, like another Nostr client)."""
    owner = encrypt_to or key
    conv = nip44.get_conversation_key(owner.secret_hex(), owner.public_key_hex)
    payload = nip44.encrypt(content, conv) if content else ""
    tags = [["d", d], ["app", "didactyl"]] + ([["prev", prev]] if prev else [])
    return sign_event(key, kind=kind, content=payload, created_at=created_at, tags=tags)


def profile_event(key: SecretKey, created_at: int = NOW, **fields: str) -> Event:
    return sign_event(key, kind=0, content=json.dumps(fields), created_at=created_at)


def contacts_event(key: SecretKey, pubkeys: list[str], created_at: int = NOW) -> Event:
    return sign_event(key, kind=3, content="", created_at=created_at, tags=[["p", pk] for pk in pubkeys])


def relays_event(key: SecretKey, urls: list[tuple[str, str]], created_at: int = NOW) -> Event:
    tags = [["r", u, m] if m else ["r", u] for u, m in urls]
    return sign_event(key, kind=10002, content="", created_at=created_at, tags=tags)


def note_event(key: SecretKey, text: str, created_at: int) -> Event:
    return sign_event(key, kind=1, content=text, created_at=created_at)


class Clock:
    """A settable wall clock (seconds)."""

    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def offline_context(tmp_path: Path, *, admin: bool = False, clock: Callable[[], float] | None = None,
                    limits: dict[MemoryType, int] | None = None) -> AgentToolContext:
    """A tool context whose caches are filled by ``ingest`` (a pool with no relays: no network at all)."""
    clock = clock or Clock()
    store = MemoryStore(AGENT_KEY, RelayPool([]), limits=limits or LIMITS, clock=clock)
    return AgentToolContext(
        memory=store,
        agent=IdentityCache(AGENT_KEY.public_key_hex, clock=clock),
        admin=IdentityCache(ADMIN_KEY.public_key_hex, clock=clock) if admin else None,
        files_root=tmp_path / "memory",
    )


async def _holds(predicate: Callable[[], Any]) -> bool:
    value = predicate()
    return bool(await value if inspect.isawaitable(value) else value)


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll until ``predicate()`` holds (relay round trips are asynchronous); fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await _holds(predicate):
        if loop.time() > deadline:
            raise AssertionError("condition not reached within the timeout")
        await asyncio.sleep(0.01)
