"""A tool call the model gets wrong is answered in words a model and a person read: what the parameter must be
and what was sent (never a Python repr), and for a tool that does not exist, every name that can be called —
aliases and the memory backend's tools (``memory_query``) included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_support import offline_context
from hypothesis import given, settings
from hypothesis import strategies as st
from tui_support import make_config, make_env

from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.service.app import AppService

REGISTRY = build_base_registry(admin=True, tasks=True, notes=True)


@pytest.mark.parametrize(("tool", "arguments", "said"), [
    ("memory_save", {"type": "mid_term", "content": "x"},
     'Error: the parameter "type" of memory_save must be one of "short_term" or "long_term"; it was the text '
     '"mid_term".'),
    ("task_update", {"id": "3"},
     'Error: the parameter "id" of task_update must be a whole number; it was the text "3".'),
    ("task_list", {"include_closed": None},
     'Error: the parameter "include_closed" of task_list must be true or false; it was null.'),
    ("post_note", {"text": ["a", "b"]},
     'Error: the parameter "text" of post_note must be text; it was a list of 2 items.'),
    ("memory_save", {"type": "short_term"}, 'Error: memory_save needs the parameter "content" (text).'),
    ("memory_save", {}, 'Error: memory_save needs these parameters "type" (one of "short_term" or "long_term"); '
                        '"content" (text).'),
    ("task_list", {"colour": "red"}, 'Error: task_list has no parameter "colour"; it takes "include_closed".'),
    ("memory_save", {"kind": 1, "type": "short_term", "content": "x"},
     'Error: memory_save has no parameter "kind"; it takes "type" and "content".'),
    ("my_npub", {"x": 1}, 'Error: my_npub has no parameter "x"; it takes no parameters.'),
])
async def test_a_wrong_argument_is_said_in_words(tool: str, arguments: dict[str, Any], said: str,
                                                 tmp_path: Path) -> None:
    outcome = await REGISTRY.call(tool, arguments, offline_context(tmp_path))
    assert outcome.is_error and outcome.content == said


# Values of every JSON type, including ones whose Python repr would differ from JSON (None, True, lists, quotes).
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=6)


@settings(max_examples=200, deadline=None)
@given(tool=st.sampled_from([t for t in REGISTRY.visible() if t.parameters["properties"]]), value=JSON_VALUES)
def test_no_argument_error_is_a_python_repr(tool: Any, value: Any) -> None:
    import asyncio

    name = next(iter(tool.parameters["properties"]))
    outcome = asyncio.run(REGISTRY.call(tool.name, {name: value}, None))
    if not outcome.is_error:
        return
    line = outcome.content
    assert "\n" not in line and len(line) < 400
    for python_only in ("['", "None", "True,", "False,", "{'"):
        assert python_only not in line.split("; it was")[0], line  # what is asked for, in words or JSON


async def test_an_unknown_tool_names_every_tool_that_can_be_called(tmp_path: Path) -> None:
    config = make_config(publish_profile=False)
    config.memory.backend = "recall"
    config.tools.offer_aliases = False  # aliases are callable even when not offered as tools of their own
    async with AppService(config, data_dir=tmp_path, env=make_env()) as service:
        outcome = await service.chat.dispatch_tool("launch_rockets", '{"target": "moon"}')
        assert outcome.is_error
        line = outcome.content
        assert line.startswith('Error: there is no tool "launch_rockets". The tools you can call: ')
        callable_names = line.split("The tools you can call: ", 1)[1]
        offered = service.prompt.tool_names_offered()
        for name in [*offered, "memory_query", "my_contacts", "my_relays", "my_kind0_profile"]:
            assert name in callable_names, name
        assert "memory_short_term_read" not in callable_names  # internal: not callable by the model
        # And each name it lists does run (an alias runs its tool).
        assert not (await service.chat.dispatch_tool("my_contacts", "{}")).is_error
        assert not (await service.chat.dispatch_tool("memory_query", '{"query": "tea"}')).is_error
