"""The soul linter: each problem is found and names its section; good souls pass untouched."""

from __future__ import annotations

import pytest

from didactyl_tui.agent.soul.lint import SoulLintError, check_soul, lint_soul
from didactyl_tui.agent.soul.template import SoulTemplate, TemplateSection, default_template, parse_soul_list
from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.registry import ToolContext, build_tool
from didactyl_tui.errors import AgentError

S = TemplateSection


def _template(*sections: TemplateSection) -> SoulTemplate:
    return SoulTemplate(sections, "test")


@pytest.mark.parametrize("admin", [True, False])
def test_the_default_soul_lints_clean_with_or_without_an_admin(admin: bool) -> None:
    registry = build_base_registry(admin=admin)
    assert lint_soul(default_template(), registry) == []
    assert check_soul(default_template(), registry) == default_template()


def test_aliases_count_as_known_tools() -> None:
    assert lint_soul(_template(S("contacts", tool="my_contacts")), build_base_registry()) == []


def test_each_problem_is_reported_with_its_section_and_position() -> None:
    registry = build_base_registry()
    template = _template(
        S("soul", content="You are Ada."),
        S("weather", tool="weather_now"),
        S("soul", content="Again."),
        S("empty", content="   "),
        S("nothing"),
        S("both", tool="my_npub", content="x"),
        S("save", tool="memory_save"),
        S("long_term", tool="my_memory"),
        S("blank_but_kept", content="", skip_if_empty=False),
    )
    issues = lint_soul(template, registry)
    found = [(i.section, i.position, i.code) for i in issues]
    assert found == [
        ("weather", 2, "unknown-tool"),
        ("soul", 3, "duplicate-section"),
        ("empty", 4, "never-renders"),
        ("nothing", 5, "no-source"),
        ("both", 6, "no-source"),
        ("save", 7, "never-renders"),
        ("long_term", 8, "never-renders"),
        ("blank_but_kept", 9, "no-source"),  # it would render as an empty message
    ]
    assert "unknown tool 'weather_now'" in str(issues[0]) and "my_npub" in str(issues[0])
    assert str(issues[1]) == "section 'soul' (#3): the name is already used by section #1"
    assert "needs parameters" in issues[5].message and "async" in issues[6].message


def test_check_soul_raises_one_error_naming_every_bad_section() -> None:
    template = parse_soul_list("- section: persona\n  content: hi\n- section: tools\n  tool: nope\n"
                               "- section: persona\n  content: again\n", "soul.txt")
    with pytest.raises(SoulLintError) as caught:
        check_soul(template, build_base_registry())
    err = caught.value
    assert isinstance(err, AgentError)
    assert err.one_line() == ("Bad soul: section 'tools' (#2): unknown tool 'nope' (known tools: "
                              + ", ".join(sorted(build_base_registry().names()))
                              + "); section 'persona' (#3): the name is already used by section #1")
    assert [i.section for i in err.issues] == ["tools", "persona"]


def test_a_sync_context_tool_added_to_the_registry_is_accepted() -> None:
    def weather_now(ctx: ToolContext) -> dict[str, str]:
        """Today's weather from the cache."""
        return {"content": "sunny"}

    registry = build_base_registry()
    registry.register(build_tool(weather_now, visible=False))
    assert lint_soul(_template(S("weather", tool="weather_now")), registry) == []
