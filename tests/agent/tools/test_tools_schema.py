"""Pin the generated OpenAI schemas of the base tools: a change to a signature or docstring shows here.

After an intended change, regenerate the pin with
``DIDACTYL_UPDATE_PINS=1 pytest tests/agent/tools/test_tools_schema.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agent_support import offline_context

from didactyl_tui.agent.tools.builtin import build_base_registry

PIN = Path(__file__).resolve().parents[2] / "pins" / "base_tool_schemas.json"


def test_base_tool_schemas_match_the_pin() -> None:
    registry = build_base_registry(admin=True, tasks=True, notes=True)
    current = {
        "offered": registry.openai_schemas(),
        "internal": [t.name for t in registry.all() if not t.visible],
        "aliases": {t.name: list(t.aliases) for t in registry.all() if t.aliases},
    }
    text = json.dumps(current, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("DIDACTYL_UPDATE_PINS") == "1":
        PIN.write_text(text, "utf-8")
    assert text == PIN.read_text("utf-8"), "tool schemas changed: regenerate the pin (see module doc) and review"


def test_the_offered_list_has_memory_and_context_tools_but_not_the_internal_reader() -> None:
    names = [t["function"]["name"] for t in build_base_registry(admin=True).openai_schemas()]
    assert names[:4] == ["memory_save", "memory_insert", "memory_replace", "my_memory"]
    assert "memory_short_term_read" not in names
    for expected in ("agent_identity", "nostr_agent_profile", "nostr_agent_contacts", "nostr_agent_relays",
                     "nostr_agent_notes", "my_npub", "my_pubkey", "admin_identity", "nostr_admin_profile",
                     "nostr_admin_contacts", "nostr_admin_relays", "nostr_admin_notes", "read_file", "write_file"):
        assert expected in names
    registry = build_base_registry()
    for alias, target in (("my_kind0_profile", "nostr_agent_profile"), ("my_contacts", "nostr_agent_contacts"),
                          ("my_relays", "nostr_agent_relays"), ("my_notes", "nostr_agent_notes")):
        assert registry.get(alias).name == target


def test_task_tools_are_offered_only_with_a_task_book() -> None:
    task_tools = {"task_list", "task_add", "task_update", "task_remove"}
    without = {t["function"]["name"] for t in build_base_registry(admin=True).openai_schemas()}
    with_tasks = {t["function"]["name"] for t in build_base_registry(admin=True, tasks=True).openai_schemas()}
    assert not task_tools & without and task_tools <= with_tasks
    assert "tasks_open_read" not in with_tasks
    registry = build_base_registry()
    assert all(registry.get(name) is not None for name in (*task_tools, "tasks_open_read"))


async def test_offered_aliases_are_their_own_schemas_and_run_their_tool(tmp_path: Path) -> None:
    plain = build_base_registry(admin=True).openai_schemas()
    offered = build_base_registry(admin=True, offer_aliases=True)
    names = [t["function"]["name"] for t in offered.openai_schemas()]
    self_context = ["agent_identity", "nostr_agent_profile", "my_kind0_profile", "nostr_agent_contacts", "my_contacts",
                    "nostr_agent_relays", "my_relays", "nostr_agent_notes", "my_notes", "my_npub", "my_pubkey"]
    start = names.index("agent_identity")
    assert names[start:start + len(self_context)] == self_context
    assert len(names) == len(plain) + 4
    by_name = {t["function"]["name"]: t["function"] for t in offered.openai_schemas()}
    assert by_name["my_contacts"]["description"] == by_name["nostr_agent_contacts"]["description"]
    assert by_name["my_contacts"]["parameters"] == by_name["nostr_agent_contacts"]["parameters"]
    out = await offered.call("my_contacts", "{}", offline_context(tmp_path))
    said = json.loads(out.content)  # nothing to show, and the model is told so in a note
    assert not out.is_error and said["content"] == "" and said["note"].endswith("No contacts yet: you follow no one.")
