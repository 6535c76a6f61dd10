"""The seeds' sections exactly: every tool a soul section may name renders what the tool returns (``task_list``
included), the linter refuses exactly the tools assembly cannot run, and ``skip_if_empty`` skips a context tool
with nothing to show (its note for the model never counts as text)."""

from __future__ import annotations

import json
from pathlib import Path

from agent_support import (
    ADMIN_KEY,
    AGENT_KEY,
    NOW,
    Clock,
    contacts_event,
    fill_caches,
    note_event,
    offline_context,
    relays_event,
    task_book,
)

from didactyl_tui.agent.soul.assembly import assemble, section_text
from didactyl_tui.agent.soul.lint import lint_soul
from didactyl_tui.agent.soul.template import SoulTemplate, TemplateSection, default_template, parse_soul_list
from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.context import AgentToolContext

REGISTRY = build_base_registry(admin=True, tasks=True, notes=True)

SEED = """\
- section: persona
  role: system
  content: You are Skald.
- section: tasks
  role: system
  tool: task_list
  skip_if_empty: true
- section: contacts
  role: system
  tool: nostr_agent_contacts
  skip_if_empty: true
"""


async def _context(tmp_path: Path, *, filled: bool) -> AgentToolContext:
    ctx = offline_context(tmp_path, admin=True)

    await ctx.memory.load()  # no relay: nothing to wait for
    ctx.tasks = task_book(ctx.saves, Clock(NOW))
    if filled:
        await fill_caches(ctx)
        assert ctx.admin is not None
        ctx.admin.ingest(None, contacts_event(ADMIN_KEY, [AGENT_KEY.public_key_hex]))
        ctx.admin.ingest(None, relays_event(ADMIN_KEY, [("wss://admin.test", "")]))
        ctx.admin.ingest(None, note_event(ADMIN_KEY, "hello from the admin", NOW - 10))
        await ctx.tasks.add("file taxes", "by Friday")
        done = await ctx.tasks.add("water plants")
        await ctx.tasks.update(done.id, status="done")
    return ctx


def _layer(ctx: AgentToolContext, section: TemplateSection):
    asm = assemble(SoulTemplate((section,), "test"), model="m", registry=REGISTRY, ctx=ctx, created_at=0.0)
    return asm.layers[0], asm


async def test_every_tool_a_section_may_name_renders_what_it_returns_and_the_linter_refuses_the_rest(
        tmp_path: Path) -> None:
    ctx = await _context(tmp_path, filled=True)
    rendered = refused = 0
    for tool in REGISTRY.all():
        section = TemplateSection(f"s_{tool.name}", tool=tool.name, skip_if_empty=False)
        issues = lint_soul(SoulTemplate((section,), "test"), REGISTRY)
        layer, _ = _layer(ctx, section)
        if issues:  # refused by the linter: assembly cannot run it either, for the same reason
            refused += 1
            assert [i.code for i in issues] == ["never-renders"] and layer.skipped, tool.name
            assert layer.skip_reason == issues[0].message, tool.name
            continue
        rendered += 1
        expected, _note = section_text(tool.handler(ctx))
        assert not layer.skipped and layer.content == expected and expected.strip(), tool.name
    assert rendered >= 15 and refused >= 7  # the context tools (task_list too); the ones needing arguments or async


async def test_a_seed_soul_renders_the_open_tasks_and_skips_an_empty_contact_list(tmp_path: Path) -> None:
    template = parse_soul_list(SEED, "seed")
    assert lint_soul(template, REGISTRY) == []
    ctx = await _context(tmp_path, filled=True)
    ctx.agent = type(ctx.agent)(AGENT_KEY.public_key_hex)  # no contacts cached
    asm = assemble(template, model="m", registry=REGISTRY, ctx=ctx, created_at=0.0)
    tasks, contacts = asm.layers[1], asm.layers[2]
    assert not tasks.skipped
    assert [t["title"] for t in json.loads(tasks.content)["tasks"]] == ["file taxes"]  # open tasks only
    assert contacts.skipped and contacts.skip_reason == "empty (skip_if_empty)"
    assert "No contacts yet" not in json.dumps(asm.messages)
    # Kept when empty: the tool's note is the text.
    kept, _ = _layer(ctx, TemplateSection("contacts", tool="nostr_agent_contacts", skip_if_empty=False))
    assert not kept.skipped and kept.content.endswith("No contacts yet: you follow no one.")
    # The built-in soul follows the seeds: every agent_* section is skipped when empty, contacts too.
    builtin = assemble(default_template(), model="m", registry=REGISTRY, ctx=ctx, created_at=0.0)
    assert all(sec.skip_if_empty for sec in default_template().sections if sec.section.startswith("agent_"))
    assert "No contacts yet" not in builtin.messages[0]["content"]
    [agent_contacts] = [layer for layer in builtin.layers if layer.section == "agent_contacts"]
    assert agent_contacts.skipped and agent_contacts.skip_reason == "empty (skip_if_empty)"


async def test_with_nothing_to_show_every_context_tool_section_is_skipped(tmp_path: Path) -> None:
    ctx = await _context(tmp_path, filled=False)
    always = {"agent_identity", "admin_identity", "my_npub", "my_pubkey"}  # the keys are always known
    for tool in REGISTRY.all():
        section = TemplateSection(f"s_{tool.name}", tool=tool.name)
        if lint_soul(SoulTemplate((section,), "test"), REGISTRY) or tool.name in always:
            continue
        layer, asm = _layer(ctx, section)
        assert layer.skipped and layer.skip_reason == "empty (skip_if_empty)", (tool.name, layer.content)
        assert asm.messages == (), tool.name
    # And each such tool still tells the model, when it calls it itself, that there is nothing.
    for name in ("nostr_agent_contacts", "nostr_agent_profile", "nostr_admin_notes", "task_list"):
        result = REGISTRY.get(name).handler(ctx)
        assert section_text(result)[0] == "" and result["note"], name
    assert ADMIN_KEY.npub in _layer(ctx, TemplateSection("a", tool="admin_identity"))[0].content


async def test_the_inspector_shows_the_backend_context_as_a_layer_where_it_is_sent(tmp_path: Path) -> None:
    from textual.app import App, ComposeResult

    from didactyl_tui.tui.widgets.assembly_tree import AssemblyTree, InspectorEntry

    ctx = await _context(tmp_path, filled=True)
    template = SoulTemplate((TemplateSection("persona", content="You are Bo."),
                             TemplateSection("tasks", tool="task_list"),
                             TemplateSection("example", "user", content="Who are you?")), "test")

    def assembly(place: str):
        return assemble(template, model="m", registry=REGISTRY, ctx=ctx, created_at=0.0,
                        history=[{"role": "user", "content": "earlier"}], user_message="hi", backend_id="recall",
                        backend_context="## Recall\n\n- tea", backend_place=place)

    class TreeApp(App[None]):
        def compose(self) -> ComposeResult:
            yield AssemblyTree(preview_lines=None)

    async with TreeApp().run_test() as pilot:
        tree = pilot.app.query_one(AssemblyTree)
        for number, place in ((1, "system"), (2, "after_history")):
            tree.add_entry(InspectorEntry(number, assembly(place)), expand=True)
        await pilot.pause()
        system, tail = (tree.node_for(n) for n in (1, 2))
        [sections_node] = [n for n in system.children if str(n.label).startswith("Sections:")]
        sections = [str(n.label) for n in sections_node.children]
        # Sent at the end of the system message: after the system sections, before the user section.
        assert [label.split(" ")[0] for label in sections] == ["persona", "tasks", "memory_backend", "example"]
        assert "backend recall · end of the system message" in sections[2]
        top = [str(n.label).split(":")[0] for n in system.children]
        assert "Memory backend" not in top
        tail_top = [str(n.label) for n in tail.children]
        history = next(i for i, label in enumerate(tail_top) if label.startswith("History:"))
        assert tail_top[history + 1].startswith("memory_backend [system] · backend recall · after the history")
        [tail_sections] = [n for n in tail.children if str(n.label).startswith("Sections:")]
        assert not any(str(n.label).startswith("memory_backend") for n in tail_sections.children)
