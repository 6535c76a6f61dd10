"""Helpers for the direct-message tests: a config for the agent, rust-nostr (PyPI ``nostr-sdk``) as the other
people's clients, and waiting for facts with a bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agent_support import AGENT_KEY

from didactyl_tui.config import Config
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.kinds import DIRECT_MESSAGE
from didactyl_tui.nostr.nip17 import gift_wrap_filter
from didactyl_tui.nostr.nip59 import unwrap
from didactyl_tui.nostr.pool import RelayPool


def dm_config(base_url: str, *, urls: list[str] | None = None, admin: str = "", allow: list[str] | None = None,
              **dm: Any) -> Config:
    """The agent's config: the LLM stub, no memory backend, nothing of its own published; the embedded relay
    unless ``urls`` (then only those)."""
    cfg = Config()
    cfg.relays.embedded_port, cfg.relays.timeout_s = 0, 3.0
    if urls is not None:
        cfg.relays.embedded.enabled = False
        cfg.relays.urls = urls
    cfg.llm.model, cfg.llm.api_base, cfg.llm.api_key_env = "openai/stub-model", base_url, "STUB_KEY"
    cfg.memory.backend = "none"
    cfg.agent.publish_profile = False
    cfg.admin.pubkey = admin
    cfg.dm.allow = list(allow or [])
    for key, value in dm.items():
        setattr(cfg.dm, key, value)
    return cfg


AGENT_ENV = {"DIDACTYL_NSEC": AGENT_KEY.nsec(), "STUB_KEY": "sk-stub"}


async def until(predicate: Callable[[], Any | Awaitable[Any]], timeout: float, what: str) -> Any:
    """Poll ``predicate`` (sync or async) until it is truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def sdk_dm(nostr_sdk: Any, sender: Any, text: str, *, to: Any = None, others: tuple[str, ...] = (),
           subject: str | None = None) -> Event:
    """A NIP-17 message from rust-nostr's client ``sender`` (Keys) to the agent (or ``to``), as our Event.
    ``others``: more participants (hex) tagged in the rumor, for a group."""
    receiver = to or nostr_sdk.PublicKey.parse(AGENT_KEY.public_key_hex)
    extra = [nostr_sdk.Tag.parse(["p", pk]) for pk in others]
    if subject:
        extra.append(nostr_sdk.Tag.parse(["subject", subject]))
    wrap = nostr_sdk.nip17_make_private_msg(sender, receiver, text, rumor_extra_tags=extra)
    return Event.from_json(wrap.as_json())


async def wraps_for(pool: RelayPool, pubkey: str, timeout: float = 3.0) -> list[Event]:
    return await pool.query([gift_wrap_filter(pubkey, since=0)], timeout=timeout)


async def replies_for(pool: RelayPool, key: SecretKey, timeout: float = 3.0) -> list[Event]:
    """The chat messages (kind 14) among the wraps for ``key``'s owner: an admin also gets each reply's prompt
    report, a wrap of another kind."""
    wraps = await wraps_for(pool, key.public_key_hex, timeout)
    return [w for w in wraps if unwrap(w, key).rumor.kind == DIRECT_MESSAGE]


def opened(nostr_sdk: Any, keys: Any, wrap: Event) -> Any:
    """rust-nostr opens ``wrap`` with ``keys``: its rumor."""
    return nostr_sdk.UnwrappedGift.from_gift_wrap(keys, nostr_sdk.Event.from_json(wrap.to_json())).rumor()


def tags_of(rumor: Any, name: str) -> list[str]:
    return [t.to_vec()[1] for t in rumor.tags() if t.to_vec()[0] == name]
