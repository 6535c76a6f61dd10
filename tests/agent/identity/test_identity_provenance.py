"""Every context section cites its source: the event id, created_at and the relays that served it."""

from __future__ import annotations

from pathlib import Path

from agent_support import ADMIN_KEY, AGENT_KEY, NOW, contacts_event, note_event, offline_context, profile_event

from didactyl_tui.agent.documents.versions import SourceEvent
from didactyl_tui.agent.identity.cache import IdentityCache
from didactyl_tui.agent.soul.assembly import assemble
from didactyl_tui.agent.soul.template import default_template
from didactyl_tui.agent.tools.builtin import build_base_registry

A, B = "ws://127.0.0.1:1", "ws://127.0.0.1:2"


def test_sources_name_the_relays_that_served_the_current_version_only() -> None:
    cache = IdentityCache(AGENT_KEY.public_key_hex, clock=lambda: NOW)
    old = profile_event(AGENT_KEY, NOW - 50, name="old")
    new = profile_event(AGENT_KEY, NOW, name="ada")
    contacts = contacts_event(AGENT_KEY, [ADMIN_KEY.public_key_hex])
    first, second = note_event(AGENT_KEY, "first", NOW - 10), note_event(AGENT_KEY, "second", NOW - 5)
    assert cache.ingest_by_relay({A: [new, contacts, first], B: [old, second], "ws://127.0.0.1:3": None})
    sources = cache.source_events("nostr_agent", identity_tool="agent_identity")
    assert sources == {
        "nostr_agent_profile": SourceEvent(new.id, NOW, (A,)),  # B only had the older version
        "nostr_agent_contacts": SourceEvent(contacts.id, NOW, (A,)),
        "agent_identity": SourceEvent(new.id, NOW, (A,)),
        "nostr_agent_notes": SourceEvent(second.id, NOW - 5, (B,)),
    }
    assert not cache.ingest(B, new)  # the same version from another relay: no change, one more source
    assert cache.source_events("nostr_agent")["nostr_agent_profile"].relays == (A, B)
    newer = profile_event(AGENT_KEY, NOW + 5, name="ada 2")
    assert cache.ingest(None, newer)  # a live event whose relay is unknown
    assert cache.source_events("nostr_agent")["nostr_agent_profile"] == SourceEvent(newer.id, NOW + 5, ())
    assert new.id not in cache._served  # forgotten with the version it described


def test_the_assembly_shows_provenance_for_identity_and_notes_sections(tmp_path: Path) -> None:
    ctx = offline_context(tmp_path, admin=True)
    ctx.agent.ingest_by_relay({A: [profile_event(AGENT_KEY, name="ada"), note_event(AGENT_KEY, "gm", NOW)]})
    ctx.admin.ingest_by_relay({B: [profile_event(ADMIN_KEY, name="admin")]})
    sources = {**ctx.agent.source_events("nostr_agent", identity_tool="agent_identity"),
               **ctx.admin.source_events("nostr_admin", identity_tool="admin_identity")}
    asm = assemble(default_template(), model="m", registry=build_base_registry(admin=True), ctx=ctx,
                   created_at=0.0, source_events=sources)
    cited = {layer.section: layer.source_event.relays for layer in asm.layers if layer.source_event}
    assert cited == {"agent_identity": (A,), "agent_profile": (A,), "agent_notes": (A,),
                     "admin_identity": (B,), "admin_profile": (B,)}
