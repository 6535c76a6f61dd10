"""Self- and admin-context tools: markdown from the caches, aliases, admin only when configured."""

from __future__ import annotations

import json
from pathlib import Path

from agent_support import (
    ADMIN_KEY,
    AGENT_KEY,
    NOW,
    OTHER_KEY,
    contacts_event,
    note_event,
    offline_context,
    profile_event,
    relays_event,
)

from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.nostr import nip19


async def call(registry, name, ctx) -> dict:
    outcome = await registry.call(name, "{}", ctx)
    assert not outcome.is_error, outcome.content
    return json.loads(outcome.content)


async def test_agent_context_tools_render_the_cache(tmp_path: Path) -> None:
    ctx = offline_context(tmp_path)
    registry = build_base_registry()
    # Nothing cached yet: empty content (a soul section would be skipped) and a note for the model.
    empty = await call(registry, "nostr_agent_profile", ctx)
    assert empty["content"] == "" and "No kind 0 profile" in empty["note"]

    ctx.agent.ingest(None, profile_event(AGENT_KEY, name="didactyl", about="Line one\nline two", nip05="d@x.test"))
    ctx.agent.ingest(None, contacts_event(AGENT_KEY, [ADMIN_KEY.public_key_hex, OTHER_KEY.public_key_hex]))
    ctx.agent.ingest(None, relays_event(AGENT_KEY, [("wss://a.test", "write")]))
    ctx.agent.ingest(None, note_event(AGENT_KEY, "hello nostr", NOW))

    profile = (await call(registry, "nostr_agent_profile", ctx))["content"]
    assert profile == ("## Agent Kind 0 Profile (source: nostr kind 0)\n\n- name: didactyl\n"
                       "- about: Line one line two\n- nip05: d@x.test")
    contacts = (await call(registry, "my_contacts", ctx))["content"]  # alias
    assert contacts.startswith("## Agent Contacts (source: nostr kind 3)\n\n2 followed:")
    assert nip19.encode_npub(ADMIN_KEY.public_key_hex) in contacts
    assert (await call(registry, "my_relays", ctx))["content"] == (
        "## Agent Relays (source: nostr kind 10002)\n\n- wss://a.test (write)")
    notes = (await call(registry, "my_notes", ctx))["content"]
    assert notes.startswith("## Agent Notes (source: nostr kind 1, newest first)") and "hello nostr" in notes
    assert (await call(registry, "my_kind0_profile", ctx))["content"] == profile
    identity = (await call(registry, "agent_identity", ctx))["content"]
    assert AGENT_KEY.npub in identity and AGENT_KEY.public_key_hex in identity and "- name: didactyl" in identity
    assert (await call(registry, "my_npub", ctx))["content"] == AGENT_KEY.npub
    assert (await call(registry, "my_pubkey", ctx))["content"] == AGENT_KEY.public_key_hex
    assert AGENT_KEY.secret_hex() not in json.dumps([identity, profile, contacts, notes])


async def test_cache_keeps_the_newest_profile_and_ignores_other_authors(tmp_path: Path) -> None:
    ctx = offline_context(tmp_path)
    assert ctx.agent.ingest(None, profile_event(AGENT_KEY, NOW, name="new"))
    assert not ctx.agent.ingest(None, profile_event(AGENT_KEY, NOW - 10, name="old"))
    assert not ctx.agent.ingest(None, profile_event(OTHER_KEY, NOW + 10, name="impostor"))
    assert not ctx.agent.ingest(None, profile_event(AGENT_KEY, NOW + 3600 * 24 * 365 * 10, name="future"))
    assert ctx.agent.view().profile == {"name": "new"}
    assert ctx.agent.dropped == {"foreign_author": 1, "future": 1}


async def test_admin_tools_offered_only_with_an_admin(tmp_path: Path) -> None:
    without = build_base_registry(admin=False)
    names = [t["function"]["name"] for t in without.openai_schemas()]
    assert not any("admin" in n for n in names)
    refused = await without.call("nostr_admin_profile", "{}", offline_context(tmp_path))
    assert refused.is_error and "there is no tool" in refused.content

    ctx = offline_context(tmp_path, admin=True)
    ctx.admin.ingest(None, profile_event(ADMIN_KEY, name="Ada"))
    with_admin = build_base_registry(admin=True)
    profile = await call(with_admin, "nostr_admin_profile", ctx)
    assert profile["content"] == "## Admin Kind 0 Profile (source: nostr kind 0)\n\n- name: Ada"
    ident = (await call(with_admin, "admin_identity", ctx))["content"]
    assert ident.startswith("## Admin Identity") and nip19.encode_npub(ADMIN_KEY.public_key_hex) in ident
    assert (await call(with_admin, "nostr_admin_notes", ctx))["content"] == ""
