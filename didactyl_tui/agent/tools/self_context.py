"""Self-knowledge tools: the agent's own identity, profile, contacts, relays and notes, from the cache.

Every tool returns ``{"content": markdown}`` headed like ``## Agent Kind 0 Profile (source: nostr kind 0)``;
the content is empty when nothing is cached, so a soul section fed by it is skipped (with ``skip_if_empty``);
a ``note`` then says so for the model's own call (and for a section kept when empty). The renderers are
shared with the admin tools (``who`` = "Agent" or "Admin") and memoized per cache change.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from ...nostr import nip19
from ..audience import Audience
from ..identity.cache import IdentityCache
from .context import AgentToolContext
from .registry import Tool, build_tool

NOTE_MAX_CHARS = 500  # one long note must not crowd out the rest of the prompt
_PROFILE_ORDER = ("name", "display_name", "about", "picture", "banner", "website", "nip05", "lud16")


def _memo(cache: IdentityCache, key: str, render: Callable[[], str]) -> str:
    text = cache.rendered.get(key)
    if text is None:
        text = cache.rendered[key] = render()
    return text


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())


def render_identity(who: str, cache: IdentityCache, source: str) -> str:
    def build() -> str:
        view = cache.view()
        lines = [f"## {who} Identity (source: {source})", "", f"- npub: {view.npub}", f"- pubkey (hex): {view.pubkey}"]
        name = view.profile.get("display_name") or view.profile.get("name")
        if name:
            lines.append(f"- name: {_one_line(name)}")
        return "\n".join(lines)

    return _memo(cache, f"identity:{who}:{source}", build)


def render_profile(who: str, cache: IdentityCache) -> str:
    def build() -> str:
        profile = cache.view().profile
        if not profile:
            return ""
        keys = [k for k in _PROFILE_ORDER if k in profile] + sorted(k for k in profile if k not in _PROFILE_ORDER)
        lines = [f"## {who} Kind 0 Profile (source: nostr kind 0)", ""]
        lines += [f"- {k}: {_one_line(profile[k])}" for k in keys if profile[k] not in ("", None)]
        return "\n".join(lines)

    return _memo(cache, f"profile:{who}", build)


def render_contacts(who: str, cache: IdentityCache) -> str:
    def build() -> str:
        contacts = cache.view().contacts
        if not contacts:
            return ""
        lines = [f"## {who} Contacts (source: nostr kind 3)", "", f"{len(contacts)} followed:"]
        lines += [f"- {nip19.encode_npub(pk)}" for pk in contacts]
        return "\n".join(lines)

    return _memo(cache, f"contacts:{who}", build)


def render_relays_in_use(cache: IdentityCache, in_use: tuple[str, ...], embedded: str | None) -> str:
    """The agent's relays: its kind 10002 list when published, and always the relays it uses right now
    (the embedded one included), so a zero-config agent still knows where it lives."""

    def build() -> str:
        listed = render_relays("Agent", cache)
        if not in_use:
            return listed
        lines = [listed, ""] if listed else ["## Agent Relays (source: the relays in use)", ""]
        lines.append("Relays in use now (memory, identity and direct messages go here):")
        lines += [f"- {url}" + (" (embedded relay on this machine)" if url == embedded else "") for url in in_use]
        return "\n".join(lines)

    return _memo(cache, f"relays-in-use:{in_use}:{embedded}", build)


def render_relays(who: str, cache: IdentityCache) -> str:
    def build() -> str:
        relays = cache.view().relays
        if not relays:
            return ""
        lines = [f"## {who} Relays (source: nostr kind 10002)", ""]
        lines += [f"- {url}" + (f" ({marker})" if marker else " (read and write)") for url, marker in relays]
        return "\n".join(lines)

    return _memo(cache, f"relays:{who}", build)


def render_notes(who: str, cache: IdentityCache) -> str:
    def build() -> str:
        notes = cache.view().notes
        if not notes:
            return ""
        lines = [f"## {who} Notes (source: nostr kind 1, newest first)", ""]
        for ev in notes:
            when = datetime.fromtimestamp(ev.created_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
            text = _one_line(ev.content)
            if len(text) > NOTE_MAX_CHARS:
                text = text[:NOTE_MAX_CHARS] + "…"
            lines.append(f"- {when}: {text}")
        return "\n".join(lines)

    return _memo(cache, f"notes:{who}", build)


def context_result(content: str, missing: str) -> dict[str, str]:
    return {"content": content} if content else {"content": "", "note": missing}


# --- the tools (no parameters; the context is injected) ---------------------------------------


def agent_identity(ctx: AgentToolContext) -> dict[str, str]:
    """Your own Nostr identity: your npub, your hex public key and your name."""
    return {"content": render_identity("Agent", ctx.agent, "agent key")}


def nostr_agent_profile(ctx: AgentToolContext) -> dict[str, str]:
    """Your own kind 0 profile (name, about, picture...) as published on your relays."""
    return context_result(render_profile("Agent", ctx.agent), "No kind 0 profile of yours is cached yet.")


NO_CONTACTS = "## Agent Contacts (source: nostr kind 3)\n\nNo contacts yet: you follow no one."


def nostr_agent_contacts(ctx: AgentToolContext) -> dict[str, str]:
    """The accounts you follow (your kind 3 contact list)."""
    # The note says it outright when the model calls the tool; the content stays empty, so a section with
    # skip_if_empty (the built-in soul's) is skipped, and one kept when empty shows the note.
    return context_result(render_contacts("Agent", ctx.agent), NO_CONTACTS)


def on_this_machine(url: str) -> bool:
    """A relay only this machine or its network reaches (loopback, a private or link-local address): where the agent
    lives, which a guest has no business knowing."""
    host = (urlsplit(url).hostname or "").lower()
    if host in ("localhost", "") or host.endswith((".localhost", ".local")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def nostr_agent_relays(ctx: AgentToolContext) -> dict[str, str]:
    """Your relay list (kind 10002): where your notes and memories are published."""
    in_use, embedded = ctx.relays_in_use, ctx.embedded_relay
    if not ctx.audience.admin:  # a guest sees the public list, not the relays on this machine
        in_use, embedded = tuple(u for u in in_use if u != embedded and not on_this_machine(u)), None
    text = render_relays_in_use(ctx.agent, in_use, embedded)
    return context_result(text, "No kind 10002 relay list of yours is cached.")


def nostr_agent_notes(ctx: AgentToolContext) -> dict[str, str]:
    """Your latest public notes (kind 1), newest first."""
    return context_result(render_notes("Agent", ctx.agent), "You have published no notes yet (none cached).")


def my_npub(ctx: AgentToolContext) -> dict[str, str]:
    """Your public key in npub (bech32) form, the form people share."""
    return {"content": ctx.agent.npub}


def my_pubkey(ctx: AgentToolContext) -> dict[str, str]:
    """Your public key as 64 hex characters (the form inside Nostr events)."""
    return {"content": ctx.agent.pubkey}


def _public(handler: Callable[..., Any], *aliases: str) -> Tool:
    """The agent's public identity: for everyone, guests included (agent/audience.py)."""
    return build_tool(handler, aliases=aliases, family="self_context", audience=Audience.EVERYONE)


SELF_CONTEXT_TOOLS: tuple[Tool, ...] = (
    _public(agent_identity),
    _public(nostr_agent_profile, "my_kind0_profile"),
    _public(nostr_agent_contacts, "my_contacts"),
    _public(nostr_agent_relays, "my_relays"),
    _public(nostr_agent_notes, "my_notes"),
    _public(my_npub),
    _public(my_pubkey),
)
