"""The served turn's tool calls in its prompt report (#31): name, short arguments and outcome travel to the admin,
bounded in count and size, and a hostile report cannot put escape sequences, huge texts or wrong types on screen."""

from __future__ import annotations

import json

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY

from didactyl_tui.agent.dm.prompt_report import MAX_REPORT_BYTES, ReportError, read_report, report_content, report_rumor
from didactyl_tui.agent.dm.report_tool_calls import MAX_ARGUMENT_KEYS, MAX_TOOL_CALLS, TEXT_CHARS
from didactyl_tui.agent.soul.prompt_record import PromptAssembly, PromptLayer
from didactyl_tui.agent.turn.events import ToolCallFinished

REPLY_ID = "e" * 64


def assembly(sections: int = 1, text: str = "You are the agent.") -> PromptAssembly:
    layers = tuple(PromptLayer(section=f"s{n}", role="system", tool=None, content=text, tokens=5)
                   for n in range(sections))
    return PromptAssembly(model="stub", created_at=1.0, layers=layers, history=(), history_dropped=0,
                          backend_id=None, backend_context=None, backend_tokens=0, user_message="hi", tools=(),
                          messages=(), total_tokens=5)


def rumor_of(content: str):
    return report_rumor(AGENT_KEY.public_key_hex, ADMIN_KEY.public_key_hex, REPLY_ID, content, created_at=1)


def saved(content: str, *, round_no: int = 1, error: bool = False) -> ToolCallFinished:
    return ToolCallFinished("call-1", "memory_save", {"type": "short_term", "content": content},
                            '{"saved": true, "relays": {"ws://relay": "accepted"}}', error, round_no)


def test_a_memory_save_travels_with_short_arguments_and_its_outcome() -> None:
    long_note = "The admin likes green tea. " * 40
    calls = [saved(long_note), ToolCallFinished("call-2", "task_add", {"title": "buy tea", "nested": {"a": [1, 2]}},
                                                "no such list", True, 2)]
    told = read_report(rumor_of(report_content(assembly(), tool_calls=calls)))
    first, second = told.tool_calls
    assert (first.name, first.is_error, first.round) == ("memory_save", False, 1)
    assert first.arguments["type"] == "short_term"
    assert first.arguments["content"] == long_note[:TEXT_CHARS] + "…"  # short, and marked as cut
    assert json.loads(first.result) == {"saved": True, "relays": {"ws://relay": "accepted"}}
    assert (second.name, second.is_error, second.round, second.result) == ("task_add", True, 2, "no such list")
    assert second.arguments == {"title": "buy tea", "nested": '{"a":[1,2]}'}  # a nested value as its JSON text
    assert first.call_id != second.call_id and first.call_id.startswith(REPLY_ID[:16])
    assert told.assembly.layers[0].content == "You are the agent."  # the prompt as before


def test_a_report_without_tool_calls_reads_as_none() -> None:
    told = read_report(rumor_of(report_content(assembly())))
    assert told.tool_calls == () and told.tool_calls_left_off == 0


def test_many_and_large_tool_calls_keep_the_report_within_its_bound() -> None:
    huge = {f"key{n}": "x" * 5000 for n in range(40)}
    calls = [ToolCallFinished(f"c{n}", "write_file", huge, "y" * 50_000, False, 1) for n in range(300)]
    content = report_content(assembly(sections=40, text="z" * 4000), tool_calls=calls)
    assert len(content.encode()) <= MAX_REPORT_BYTES
    told = read_report(rumor_of(content))
    assert 0 < len(told.tool_calls) <= MAX_TOOL_CALLS
    assert told.tool_calls_left_off == 300 - len(told.tool_calls)
    for call in told.tool_calls:
        assert len(call.arguments) == MAX_ARGUMENT_KEYS + 1 and "more arguments at the agent" in call.arguments["…"]
        assert "more characters at the agent" in call.result or call.result == ""


def test_a_hostile_report_shows_no_escape_and_a_wrong_type_is_refused() -> None:
    body = json.loads(report_content(assembly()))
    body["tool_calls"] = [{"name": "\x1b[2Jmemory_save\nforged", "arguments": {"\x1b]52;c;": "\x1b[31mred\x07"},
                           "result": "ok\x1b[H", "result_cut": 10**9, "error": False, "round": 1}] * 100
    told = read_report(rumor_of(json.dumps(body)))
    assert len(told.tool_calls) == MAX_TOOL_CALLS
    call = told.tool_calls[0]
    shown = call.name + json.dumps(call.arguments) + call.result
    assert "\x1b" not in shown and "\x07" not in shown and "\n" not in call.name
    for wrong in ("not a list", [1], [{"name": 5}], [{"name": "a", "arguments": []}], [{"name": "a", "round": "1"}],
                  [{"name": "a", "result_cut": True}]):
        body["tool_calls"] = wrong
        with pytest.raises(ReportError):
            read_report(rumor_of(json.dumps(body)))
