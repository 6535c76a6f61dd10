"""Admin-context tools: what the agent knows of its admin (``[admin] pubkey``), from the cache.

Offered only when an admin is configured (see ``builtin.build_base_registry``); each returns
``{"content": markdown}`` headed like ``## Admin Kind 0 Profile (source: nostr kind 0)``.
"""

from __future__ import annotations

from ..identity.cache import IdentityCache
from .context import AgentToolContext
from .registry import Tool, ToolError, build_tool
from .self_context import context_result, render_contacts, render_identity, render_notes, render_profile, render_relays


def _admin(ctx: AgentToolContext) -> IdentityCache:
    if ctx.admin is None:
        raise ToolError("no admin is configured ([admin] pubkey is empty)")
    return ctx.admin


def admin_identity(ctx: AgentToolContext) -> dict[str, str]:
    """Your admin's Nostr identity (the person you work for): npub, hex public key and name."""
    return {"content": render_identity("Admin", _admin(ctx), "[admin] pubkey in the config")}


def nostr_admin_profile(ctx: AgentToolContext) -> dict[str, str]:
    """Your admin's kind 0 profile (name, about, picture...)."""
    return context_result(render_profile("Admin", _admin(ctx)), "No kind 0 profile of your admin is cached.")


def nostr_admin_contacts(ctx: AgentToolContext) -> dict[str, str]:
    """The accounts your admin follows (their kind 3 contact list)."""
    return context_result(render_contacts("Admin", _admin(ctx)), "No kind 3 contact list of your admin is cached.")


def nostr_admin_relays(ctx: AgentToolContext) -> dict[str, str]:
    """Your admin's relay list (kind 10002)."""
    return context_result(render_relays("Admin", _admin(ctx)), "No kind 10002 relay list of your admin is cached.")


def nostr_admin_notes(ctx: AgentToolContext) -> dict[str, str]:
    """Your admin's latest public notes (kind 1), newest first."""
    return context_result(render_notes("Admin", _admin(ctx)), "No notes of your admin are cached.")


ADMIN_CONTEXT_TOOLS: tuple[Tool, ...] = (
    build_tool(admin_identity, family="admin_context"),
    build_tool(nostr_admin_profile, family="admin_context"),
    build_tool(nostr_admin_contacts, family="admin_context"),
    build_tool(nostr_admin_relays, family="admin_context"),
    build_tool(nostr_admin_notes, family="admin_context"),
)
