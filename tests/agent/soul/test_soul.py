"""The soul template (data, config, the original list format) and its pure assembly into a PromptAssembly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_support import (
    AGENT_KEY,
    fill_caches,
    offline_context,
)

from didactyl_tui.agent.documents.versions import SourceEvent
from didactyl_tui.agent.llm.tokens import count_tokens
from didactyl_tui.agent.soul.assembly import assemble, count_assembly, countable_texts
from didactyl_tui.agent.soul.template import (
    DEFAULT_PERSONA,
    SoulTemplate,
    TemplateSection,
    default_template,
    load_soul_template,
    parse_soul_list,
)
from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.config import SoulConfig, SoulSection
from didactyl_tui.config_file import parse_config
from didactyl_tui.errors import ConfigError

DEFAULT_ORDER = [
    "soul", "admin_identity", "admin_profile", "admin_contacts", "admin_relays", "admin_notes",
    "agent_identity", "agent_profile", "agent_contacts", "agent_relays", "agent_notes", "short_term_memory",
    "tasks",
]

SOUL_FILE = """\
# my soul, moved over from the old app
- section: soul
  role: system
  content: |
    You are Ada.

    Be brief.
- section: agent_identity
  role: system
  tool: agent_identity
  skip_if_empty: false
- section: greeting
  role: assistant
  content: "Hello \\"friend\\""
  skip_if_empty: no
- section: short_term_memory
  tool: memory_short_term_read
"""


def test_default_template_order_and_tools() -> None:
    template = default_template()
    assert template.names == DEFAULT_ORDER and template.source == "built-in"
    assert template.sections[0].content == DEFAULT_PERSONA
    assert [s.tool for s in template.sections[-2:]] == ["memory_short_term_read", "tasks_open_read"]
    # The persona tells the agent what its memory, self-knowledge and task tools are for.
    for name in ("memory_save", "my_memory", "read_file", "nostr_agent_profile", "my_npub", "task_add"):
        assert name in DEFAULT_PERSONA
    assert load_soul_template(SoulConfig()) == template


def test_the_original_list_format_is_read() -> None:
    template = parse_soul_list(SOUL_FILE, "soul.md")
    assert template.names == ["soul", "agent_identity", "greeting", "short_term_memory"]
    soul, ident, greeting, stm = template.sections
    assert soul == TemplateSection("soul", "system", None, "You are Ada.\n\nBe brief.", True)
    assert ident == TemplateSection("agent_identity", "system", "agent_identity", None, False)
    assert greeting == TemplateSection("greeting", "assistant", None, 'Hello "friend"', False)
    assert stm.role == "system" and stm.tool == "memory_short_term_read" and stm.skip_if_empty


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("role: system\n", "line 1: a section starts with '- section: NAME'"),
        ("- section: a\n  colour: red\n", "line 2: unknown key 'colour'"),
        ("- section: a\n  role: narrator\n  content: x\n", "line 1: section 'a': role must be"),
        ("- section: a\n  role: system\n", "line 1: section 'a' needs exactly one of tool or content"),
        ("- section: a\n  tool: t\n  content: x\n", "needs exactly one of tool or content"),
        ("- section: a\n  content: x\n  skip_if_empty: maybe\n", "line 3: skip_if_empty must be true or false"),
        ("just words\n", "line 1: expected 'key: value'"),
        ("# nothing\n", "no sections found"),
    ],
)
def test_bad_soul_files_name_the_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_soul_list(text, "soul.md")


def test_config_sections_and_soul_file(tmp_path: Path) -> None:
    cfg = parse_config(
        '[[soul.sections]]\nsection = "persona"\ncontent = "You are Bo."\n'
        '[[soul.sections]]\nsection = "stm"\ntool = "memory_short_term_read"\nskip_if_empty = false\n'
    )
    template = load_soul_template(cfg.soul)
    assert template.source == "config"
    assert template.sections == (
        TemplateSection("persona", "system", None, "You are Bo.", True),
        TemplateSection("stm", "system", "memory_short_term_read", None, False),
    )
    (tmp_path / "soul.md").write_text(SOUL_FILE)
    from_file = load_soul_template(SoulConfig(file="soul.md"), base_dir=tmp_path)
    assert from_file.names[0] == "soul" and from_file.source == str(tmp_path / "soul.md")
    with pytest.raises(ConfigError, match="not both"):
        load_soul_template(SoulConfig(file="soul.md", sections=[SoulSection(section="x", content="y")]))
    with pytest.raises(ConfigError, match="cannot read"):
        load_soul_template(SoulConfig(file="missing.md"), base_dir=tmp_path)
    with pytest.raises(ConfigError, match="needs exactly one of tool or content"):
        load_soul_template(SoulConfig(sections=[SoulSection(section="x")]))


async def test_assembly_layers_messages_and_totals(tmp_path: Path) -> None:
    ctx = offline_context(tmp_path, admin=True)
    await fill_caches(ctx)
    registry = build_base_registry(admin=True)
    history = [{"role": "user", "content": "earlier question"}, {"role": "assistant", "content": "earlier answer"}]
    snap = ctx.memory.snapshot("short_term")
    stm_source = SourceEvent(snap.event_id, snap.created_at, ("ws://relay.test",))
    asm = assemble(
        default_template(), model="openai/stub-model", registry=registry, ctx=ctx, created_at=123.0,
        history=history, history_dropped=3, user_message="What do you remember?",
        backend_id="recall", backend_context="## Recall\n\n- earlier: Ada likes tea",
        source_events={"memory_short_term_read": stm_source},
    )
    by_name = {layer.section: layer for layer in asm.layers}
    assert [layer.section for layer in asm.layers] == DEFAULT_ORDER
    stm = by_name["short_term_memory"]
    assert stm.content == "## Short-Term Memory\n\nAdmin is Ada.\n\n(13/8,000 chars used)"
    assert stm.tool == "memory_short_term_read" and stm.source_event == stm_source and not stm.skipped
    assert by_name["agent_profile"].content.startswith("## Agent Kind 0 Profile (source: nostr kind 0)\n\n")
    assert "- name: didactyl" in by_name["agent_profile"].content
    assert by_name["admin_profile"].content.startswith("## Admin Kind 0 Profile (source: nostr kind 0)")
    assert by_name["agent_notes"].content.index("second note") < by_name["agent_notes"].content.index("first note")
    assert "wss://b.test (read)" in by_name["agent_relays"].content
    # Nothing cached for the admin's contacts, relays and notes: skipped, with the reason.
    for name in ("admin_contacts", "admin_relays", "admin_notes"):
        assert by_name[name].skipped and by_name[name].skip_reason == "empty (skip_if_empty)"
    for layer in asm.layers:
        assert layer.tokens == (0 if layer.skipped else count_tokens("openai/stub-model", layer.content))

    # Exactly what is sent: one system message (the soul's system sections, then the backend's context, as the Skald
    # design prepends it to the extra system context), the history, the user's message.
    sent = list(asm.messages)
    included = [layer.content for layer in asm.layers if not layer.skipped]
    recall = "## Recall\n\n- earlier: Ada likes tea"
    assert sent[0] == {"role": "system", "content": "\n\n".join([*included, recall])}
    assert sent[1:3] == history
    assert sent[3] == {"role": "user", "content": "What do you remember?"}
    assert len(sent) == 4 and asm.backend_place == "system"

    assert asm.history_dropped == 3 and asm.backend_id == "recall" and asm.backend_tokens > 0
    assert "memory_short_term_read" not in asm.tool_names
    assert {"memory_save", "my_memory", "nostr_agent_profile", "nostr_admin_notes"} <= set(asm.tool_names)
    extra = asm.extra
    assert asm.total_tokens == (extra["section_tokens"] + extra["history_tokens"] + asm.backend_tokens
                                + extra["user_tokens"] + extra["tools_tokens"])
    assert extra["section_tokens"] == sum(layer.tokens for layer in asm.layers)
    data = json.loads(json.dumps(asm.to_json_dict()))  # the --json shape is plain JSON
    assert data["sections"][-2]["source_event"] == {  # the short-term memory section (tasks is last)
        "event_id": snap.event_id, "created_at": snap.created_at, "relays": ["ws://relay.test"]}
    assert data["tools"] == asm.tool_names and data["total_tokens"] == asm.total_tokens
    assert data["backend"] == {"id": "recall", "context": recall, "tokens": asm.backend_tokens, "place": "system",
                               "withheld": None}
    assert data["policy"] == {"audience": "admin", "who": "the admin's own conversation", "withheld": []}

    # The old place, for providers' prefix caching ([memory] backend_context = "after_history"): its own system
    # message after the history; the rest of the prompt is the same as without a backend.
    tail = assemble(default_template(), model="openai/stub-model", registry=registry, ctx=ctx, created_at=123.0,
                    history=history, user_message="What do you remember?", backend_id="recall",
                    backend_context=recall, backend_place="after_history")
    assert list(tail.messages) == [{"role": "system", "content": "\n\n".join(included)}, *history,
                                   {"role": "system", "content": recall},
                                   {"role": "user", "content": "What do you remember?"}]
    assert tail.total_tokens == asm.total_tokens


async def test_an_assembly_counted_apart_has_the_numbers_of_one_counted_as_it_goes(tmp_path: Path) -> None:
    """What the service does (service/prompt.py): assembled uncounted on the loop, its texts counted elsewhere, the
    numbers filled in — the same record as counting during the assembly, every count from the texts listed."""
    ctx = offline_context(tmp_path, admin=True)
    await fill_caches(ctx)
    history = [{"role": "user", "content": "earlier question"}, {"role": "assistant", "content": "earlier answer"}]

    def words(model: str, text: str) -> int:  # any pure counter: the numbers are the counter's, not assembly's
        return len(text.split())

    def made(count: Any) -> Any:
        return assemble(default_template(), model="m", registry=build_base_registry(admin=True), ctx=ctx,
                        created_at=1.0, history=history, user_message="What do you remember?", backend_id="recall",
                        backend_context="## Recall\n\n- Ada likes tea", count=count)

    uncounted = made(None)
    assert uncounted.total_tokens == 0 and all(layer.tokens == 0 for layer in uncounted.layers)
    counts = {text: words("m", text) for text in countable_texts(uncounted)}  # a KeyError below: a text left out
    counted = count_assembly(uncounted, counts.__getitem__)
    assert counted == made(words)
    assert counted.total_tokens > counted.extra["section_tokens"] > 0 and counted.backend_tokens == 6


def test_empty_caches_skip_sections_and_no_admin_says_why(tmp_path: Path) -> None:
    ctx = offline_context(tmp_path, admin=False)
    asm = assemble(default_template(), model="m", registry=build_base_registry(admin=False), ctx=ctx,
                   created_at=0.0, dry_run=True)
    by_name = {layer.section: layer for layer in asm.layers}
    assert by_name["short_term_memory"].skipped and by_name["short_term_memory"].skip_reason == "empty (skip_if_empty)"
    assert by_name["admin_identity"].skipped
    assert "no admin is configured" in by_name["admin_identity"].skip_reason
    assert not by_name["agent_identity"].skipped  # the key is always known
    assert AGENT_KEY.npub in by_name["agent_identity"].content
    assert [m["role"] for m in asm.messages] == ["system"]  # no history, no backend, no user message
    assert asm.user_message is None and asm.dry_run
    assert not any(name.startswith("nostr_admin") for name in asm.tool_names)


async def test_static_roles_unknown_and_async_tools(tmp_path: Path) -> None:
    ctx = offline_context(tmp_path)
    await fill_caches(ctx)
    template = SoulTemplate((
        TemplateSection("persona", "system", content="You are Bo."),
        TemplateSection("example_q", "user", content="Who are you?"),
        TemplateSection("example_a", "assistant", content="Bo."),
        TemplateSection("missing", "system", tool="no_such_tool"),
        TemplateSection("long_term", "system", tool="my_memory"),  # async, may fetch: not for a section
        TemplateSection("stm", "system", tool="memory_short_term_read"),
        TemplateSection("blank", "system", content="", skip_if_empty=False),
    ), "test")
    asm = assemble(template, model="m", registry=build_base_registry(), ctx=ctx, created_at=0.0, user_message="hi")
    reasons = {layer.section: layer.skip_reason for layer in asm.layers if layer.skipped}
    assert reasons == {
        "missing": "unknown tool 'no_such_tool'",
        "long_term": "tool 'my_memory' is async; a section needs a cache-only tool",  # the linter's words
    }
    assert [m["role"] for m in asm.messages] == ["system", "user", "assistant", "system", "user"]
    assert asm.messages[3]["content"].startswith("## Short-Term Memory\n\nAdmin is Ada.")
    assert asm.messages[3]["content"].endswith("\n\n")  # the kept blank section joined after it
