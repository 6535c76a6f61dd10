"""The permission gate: a tool that acts runs only with someone's leave — the person (once, or always: kept and
revocable), or the config where nobody is there; never in a guest's conversation."""

from __future__ import annotations

from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.permission import (
    Decision,
    PermissionGate,
    PermissionRequest,
    Where,
    pattern_allows,
    shown_arguments,
)
from didactyl_tui.agent.tools.registry import Tool


def _acting(name: str = "fx__echo") -> Tool:
    async def handler(**kwargs: object) -> str:
        return "ran"

    return Tool(name, "[MCP server fx] Say it back.", {"type": "object", "properties": {}}, handler, family="mcp",
                origin="MCP server fx", acts=True)


def test_the_tools_that_act_are_declared_so() -> None:
    registry = build_base_registry(tasks=True, notes=True)
    assert {t.name for t in registry.all() if t.acts} == {"write_file", "post_note"}


class Person:
    def __init__(self, *answers: Decision) -> None:
        self.answers = list(answers)
        self.asked: list[PermissionRequest] = []

    async def __call__(self, request: PermissionRequest) -> Decision:
        self.asked.append(request)
        return self.answers.pop(0)


async def test_the_person_allows_once_always_or_denies_and_always_is_kept_until_revoked() -> None:
    gate, person = PermissionGate(), Person(Decision.DENY, Decision.ONCE, Decision.ALWAYS)
    changes: list[frozenset[str]] = []
    gate.add_listener(changes.append)
    gate.register_asker(person)
    tool = _acting()
    denied = await gate.check(tool, {"text": "a"}, Where.PERSON)
    assert not denied.allowed and denied.how == "denied by you"
    assert "not run: fx__echo was denied by you" in denied.refusal("fx__echo")
    once = await gate.check(tool, '{"text": "b"}', Where.PERSON)
    assert once.allowed and once.how == "allowed once by you"
    always = await gate.check(tool, {}, Where.PERSON)
    assert always.allowed and gate.always == {"fx__echo"} and changes == [frozenset({"fx__echo"})]
    again = await gate.check(tool, {}, Where.PERSON)
    assert again.allowed and again.how == "allowed: you always allow it" and len(person.asked) == 3  # not asked
    assert [(r.tool, r.origin) for r in person.asked] == [("fx__echo", "MCP server fx")] * 3
    assert '"text": "b"' in person.asked[1].arguments
    assert gate.revoke("fx__echo") and gate.always == frozenset() and changes[-1] == frozenset()
    assert not gate.revoke("fx__echo")


async def test_nobody_to_ask_denies_unless_the_config_allows() -> None:
    tool = _acting()
    assert not (await PermissionGate().check(tool, {}, Where.NOBODY)).allowed
    assert not (await PermissionGate().check(tool, {}, Where.PERSON)).allowed  # no view registered to ask
    assert (await PermissionGate(["fx__echo"]).check(tool, {}, Where.NOBODY)).allowed
    assert (await PermissionGate(["fx__*"]).check(tool, {}, Where.NOBODY)).allowed
    assert not (await PermissionGate(["fy__*", "fx__ech"]).check(tool, {}, Where.NOBODY)).allowed


async def test_a_guest_never_and_the_admins_dms_only_as_configured() -> None:
    tool, person = _acting(), Person(Decision.ALWAYS)
    gate = PermissionGate(["fx__*"], admin_dms=False)
    gate.register_asker(person)
    assert not (await gate.check(tool, {}, Where.GUEST)).allowed and not gate.offered("fx__echo", Where.GUEST)
    assert not (await gate.check(tool, {}, Where.ADMIN_DM)).allowed and not gate.offered("fx__echo", Where.ADMIN_DM)
    opened = PermissionGate(["fx__*"], admin_dms=True)
    assert (await opened.check(tool, {}, Where.ADMIN_DM)).allowed and opened.offered("fx__echo", Where.ADMIN_DM)
    assert not (await opened.check(tool, {}, Where.GUEST)).allowed  # whatever the config says
    assert person.asked == []


async def test_a_tool_that_does_not_act_passes_without_a_question() -> None:
    registry = build_base_registry()
    gate = PermissionGate()
    verdict = await gate.check(registry.get("my_npub"), {}, Where.GUEST)  # type: ignore[arg-type]
    assert verdict.allowed


def test_arguments_shown_are_cleaned_and_bounded() -> None:
    shown = shown_arguments({"text": "\x1b]52;c;aGk=\x07hi\x1b[2J" + "x" * 5000}, limit=100)
    assert "\x1b" not in shown and "\x07" not in shown and len(shown) < 140 and "more characters" in shown
    assert shown_arguments("not json \x1b[31m") == "not json "


def test_patterns() -> None:
    assert pattern_allows(["post_note"], "post_note") and not pattern_allows(["post_*"], "post_note")
    assert pattern_allows(["srv__*"], "srv__x") and not pattern_allows(["srv__*"], "srv2__x")
