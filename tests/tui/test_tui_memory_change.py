"""A partial memory change (memory_insert, memory_replace) is shown as a diff: in the tool call inline in the
conversation, and in the inspector's tool rounds. Real app, the stub model over HTTP, the embedded relay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply, ToolCall
from tui_support import make_app, make_config, screen_text, started, wait_for

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.tui.widgets.assembly_tree import AssemblyTree
from didactyl_tui.tui.widgets.tool_call_entry import ToolCallEntry

SIZE = (130, 40)
pytestmark = pytest.mark.usefixtures("warm_litellm")


async def test_a_memory_insert_shows_its_change_as_a_diff_inline_and_in_the_inspector(
        tmp_path: Path, stub: LlmStub) -> None:
    stub.script(
        Reply.tools(ToolCall("memory_insert", json.dumps({"type": "short_term", "new_str": "- plays go"}))),
        Reply.text_reply("Noted."),
    )
    app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        assert app.service is not None
        await app.service.documents.save(DocumentKey.SHORT_TERM, "# Ada\n- likes tea")
        main.chat_input.focus()
        await pilot.press(*"I play go")
        await pilot.press("enter")
        await wait_for(pilot, lambda: not main.streaming and main.conversation.last_reply(), 30, "the reply")
        assert app.service.documents.snapshot(DocumentKey.SHORT_TERM).content == "# Ada\n- likes tea\n- plays go"

        (call,) = main.conversation.query(ToolCallEntry)
        assert call.ending == "done", call.result
        call.collapsed = False
        await wait_for(pilot, lambda: all(t in screen_text(app) for t in ("change", " - likes tea", "+- plays go")),
                       10, lambda: f"the change as a diff in:\n{screen_text(app)}")
        assert '"diff"' not in screen_text(app)  # not shown again as one escaped JSON line

        entry = main.inspector.entries[-1]
        tree = main.inspector.query_one(AssemblyTree)
        node = tree.node_for(entry.number)
        assert node is not None
        [rounds] = [c for c in node.children if str(c.label).startswith("Tool rounds")]
        [change] = [c for c in rounds.children[0].children if str(c.label) == "change"]
        lines = {str(leaf.label): leaf.data.style for leaf in change.children if leaf.data is not None}
        assert lines["+- plays go"] == "added" and lines[" - likes tea"] is None
