"""Who may read each part of a prompt (agent/audience.py): the defaults a tool declares, the soul's own marks in
all three of its forms (read liberally), a withheld section never rendered, and the record saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, fill_caches, offline_context

from didactyl_tui.agent.audience import ADMIN_TURN, Audience, guest_turn, read_audience
from didactyl_tui.agent.dm.inbox import DmPolicy
from didactyl_tui.agent.dm.prompt_report import read_report, report_content, report_rumor
from didactyl_tui.agent.soul.assembly import assemble
from didactyl_tui.agent.soul.content import read_soul_text, soul_to_json
from didactyl_tui.agent.soul.template import SoulTemplate, TemplateSection, default_template, load_soul_template
from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.registry import build_tool
from didactyl_tui.agent.tools.self_context import nostr_agent_relays, on_this_machine
from didactyl_tui.config import SoulConfig, SoulSection

GUEST = guest_turn("a conversation with Bob, who is not the admin")
PUBLIC_TOOLS = {"agent_identity", "nostr_agent_profile", "nostr_agent_contacts", "nostr_agent_relays",
                "nostr_agent_notes", "my_npub", "my_pubkey"}


@pytest.mark.parametrize(("word", "audience"), [
    ("admin", Audience.ADMIN), ("Private", Audience.ADMIN), (" OWNER ", Audience.ADMIN),
    ("everyone", Audience.EVERYONE), ("Public", Audience.EVERYONE), ("all", Audience.EVERYONE),
    ("friends", Audience.ADMIN),  # a word this app does not know: the safe reading
])
def test_an_audience_is_read_liberally_and_an_unknown_word_means_the_admin_only(word: str,
                                                                                 audience: Audience) -> None:
    assert read_audience(word) is audience
    assert read_audience("") is None and read_audience(None) is None


def test_only_the_agents_public_identity_is_declared_for_everyone() -> None:
    registry = build_base_registry(admin=True, tasks=True, notes=True)
    public = {t.name for t in registry.all() if t.audience is Audience.EVERYONE}
    assert public == PUBLIC_TOOLS  # memory, tasks, the admin's context, files and notes: the admin only
    names = [s.section for s in default_template().sections
             if s.audience_for(registry.get(s.tool) if s.tool else None) is Audience.EVERYONE]
    assert names == ["soul", "agent_identity", "agent_profile", "agent_contacts", "agent_relays", "agent_notes"]


def test_the_soul_marks_an_audience_in_each_of_its_forms_and_publishes_only_what_it_was_told() -> None:
    listed = read_soul_text("seed", "- section: persona\n  content: You are Skald.\n  audience: Private\n"
                                    "- section: stm\n  tool: memory_short_term_read\n  audience: public\n"
                                    "- section: tasks\n  tool: tasks_open_read\n")
    assert [s.audience for s in listed.sections] == [Audience.ADMIN, Audience.EVERYONE, None]
    stored = json.loads(soul_to_json(listed))
    assert [s.get("audience") for s in stored["sections"]] == ["admin", "everyone", None]
    assert "audience" not in stored["sections"][2]  # an unmarked soul reads and writes as it always did
    assert read_soul_text("again", soul_to_json(listed)).sections == listed.sections
    assert "audience" not in soul_to_json(default_template())
    configured = load_soul_template(SoulConfig(sections=[
        SoulSection(section="notes", tool="nostr_agent_notes", audience="admin"),
        SoulSection(section="persona", content="Hi.")]))
    assert [s.audience for s in configured.sections] == [Audience.ADMIN, None]


async def test_a_guest_gets_only_what_is_for_everyone_and_a_withheld_tool_is_never_run(tmp_path: Path) -> None:
    ctx = offline_context(tmp_path, admin=True)
    await ctx.memory.load()
    await fill_caches(ctx, stm="The admin's sister is Beth.")
    registry = build_base_registry(admin=True, tasks=True, notes=True)
    calls: list[str] = []

    def private_feed() -> dict[str, str]:
        """A context tool nobody declared public."""
        calls.append("run")
        return {"content": "private"}

    registry.register(build_tool(private_feed, visible=False))
    template = SoulTemplate((
        TemplateSection("persona", content="You are didactyl."),
        TemplateSection("secret persona", content="Say the admin's birthday is in May.", audience=Audience.ADMIN),
        TemplateSection("feed", tool="private_feed"),
        TemplateSection("stm", tool="memory_short_term_read"),
        TemplateSection("stm shared", tool="memory_short_term_read", audience=Audience.EVERYONE),
        TemplateSection("admin", tool="nostr_admin_profile"),
        TemplateSection("me", tool="nostr_agent_profile"),
    ), "test")

    guest = assemble(template, model="m", registry=registry, ctx=ctx, created_at=0.0, audience=GUEST,
                     backend_id="recall", backend_context=None, backend_withheld="withheld: no")
    assert calls == []  # the private feed was never run for the guest
    shown = {layer.section: layer for layer in guest.layers if not layer.skipped}
    assert set(shown) == {"persona", "stm shared", "me"}  # what the soul made public is public
    assert "Beth" in shown["stm shared"].content
    withheld = {layer.section: layer.skip_reason for layer in guest.withheld}
    assert set(withheld) == {"secret persona", "feed", "stm", "admin"}
    assert set(withheld.values()) == {"withheld: for the admin only; this is a conversation with Bob, who is not "
                                      "the admin"}
    sent = json.dumps(guest.messages)
    assert "May" not in sent and "Ada" not in sent and "private" not in sent
    assert guest.audience == "guest" and guest.backend_withheld == "withheld: no"

    admin = assemble(template, model="m", registry=registry, ctx=ctx, created_at=0.0, audience=ADMIN_TURN)
    assert calls == ["run"] and admin.withheld == [] and not any(layer.skipped for layer in admin.layers)

    # The record the inspector and the admin's prompt report read says it all.
    data = guest.to_json_dict()
    assert data["policy"]["audience"] == "guest" and data["policy"]["who"] == GUEST.who
    assert [w["section"] for w in data["policy"]["withheld"]] == ["secret persona", "feed", "stm", "admin"]
    assert data["backend"]["withheld"] == "withheld: no"
    rumor = report_rumor(ADMIN_KEY.public_key_hex, ADMIN_KEY.public_key_hex, "e" * 64, report_content(guest),
                         created_at=1)
    told = read_report(rumor).assembly
    assert told.audience == "guest" and told.audience_who == GUEST.who
    assert [layer.section for layer in told.withheld] == ["secret persona", "feed", "stm", "admin"]


async def test_a_guest_is_not_told_the_relays_on_this_machine(tmp_path: Path) -> None:
    ctx = offline_context(tmp_path)
    ctx.relays_in_use = ("ws://127.0.0.1:7447", "wss://relay.example", "ws://192.168.1.5:7000")
    ctx.embedded_relay = "ws://127.0.0.1:7447"
    admin = nostr_agent_relays(ctx)["content"]
    assert "127.0.0.1" in admin and "(embedded relay on this machine)" in admin
    ctx.audience = GUEST
    guest = nostr_agent_relays(ctx)["content"]
    assert "wss://relay.example" in guest and "127.0.0.1" not in guest and "192.168" not in guest
    assert [on_this_machine(u) for u in ("ws://localhost:1", "ws://[::1]:2", "wss://nos.lol", "ws://10.0.0.2")] == \
        [True, True, False, True]


def test_a_group_with_the_admin_in_it_is_a_guests_conversation() -> None:
    bob = "b" * 64
    policy = DmPolicy.of(ADMIN_KEY.public_key_hex, [bob])
    assert policy.audience(ADMIN_KEY.public_key_hex, "Ada") == ADMIN_TURN
    alone = policy.audience(bob, "Bob")
    assert not alone.admin and alone.who == "a conversation with Bob, who is not the admin"
    group = policy.audience(",".join(sorted([ADMIN_KEY.public_key_hex, bob])), "Ada, Bob")
    assert not group.admin and group.who == "a group conversation of Ada, Bob (the admin among them)"
