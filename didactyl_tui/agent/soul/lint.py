"""The soul linter: what a template gets wrong that its own shape checks cannot see.

Run before every publish and on load (of the config, file or kind 31120 soul). Each problem names the
section it is in (and its position, for duplicates). Errors:

- ``unknown-tool``: the section names a tool the registry does not have (not even as an alias);
- ``duplicate-section``: a second section with the same name (the inspector and provenance key on it);
- ``no-source``: neither a tool nor any content (an empty or blank ``content`` counts as none);
- ``never-renders``: the tool can never feed a section: it needs parameters, or it is async (a section
  is filled synchronously from caches: :func:`~.template.section_tool_problem`, the rule assembly applies too), or
  the section's fixed content is blank and skipped when empty. Every other tool renders what it returns
  (:func:`~.soul.section_text`): its ``content``, or its whole result.

Pure: reads the template and the registry only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...errors import AgentError
from ..tools.registry import ToolRegistry
from .template import SoulTemplate, TemplateSection, section_tool_problem


class SoulLintError(AgentError):
    """The soul has problems; the message lists each one with its section."""

    title = "Bad soul"

    def __init__(self, issues: Iterable[SoulIssue]) -> None:
        self.issues = tuple(issues)
        super().__init__("; ".join(str(i) for i in self.issues))


@dataclass(frozen=True, slots=True)
class SoulIssue:
    section: str
    position: int  # 1-based place in the template
    code: str
    message: str

    def __str__(self) -> str:
        return f"section {self.section!r} (#{self.position}): {self.message}"


def lint_soul(template: SoulTemplate, registry: ToolRegistry) -> list[SoulIssue]:
    """Every problem of ``template`` against ``registry``, in template order."""
    issues: list[SoulIssue] = []
    first_seen: dict[str, int] = {}
    for pos, sec in enumerate(template.sections, 1):
        if sec.section in first_seen:
            issues.append(SoulIssue(sec.section, pos, "duplicate-section",
                                    f"the name is already used by section #{first_seen[sec.section]}"))
        else:
            first_seen[sec.section] = pos
        problem = _source_problem(sec, registry)
        if problem is not None:
            issues.append(SoulIssue(sec.section, pos, *problem))
    return issues


def check_soul(template: SoulTemplate, registry: ToolRegistry) -> SoulTemplate:
    """``template`` unchanged when it lints clean; else :class:`SoulLintError` naming every section."""
    issues = lint_soul(template, registry)
    if issues:
        raise SoulLintError(issues)
    return template


def _source_problem(sec: TemplateSection, registry: ToolRegistry) -> tuple[str, str] | None:
    has_content = sec.content is not None and sec.content.strip() != ""
    if not sec.tool:
        if has_content:
            return None
        if sec.content is not None and sec.skip_if_empty:
            return "never-renders", "its content is blank and it is skipped when empty"
        return "no-source", "it has neither a tool nor any content"
    if sec.content is not None:
        return "no-source", "it has both a tool and content; give exactly one"
    tool = registry.get(sec.tool)
    if tool is None:
        known = ", ".join(sorted(registry.names()))
        return "unknown-tool", f"unknown tool {sec.tool!r} (known tools: {known})"
    problem = section_tool_problem(tool)  # the very rule assembly applies: what passes here renders there
    return ("never-renders", problem) if problem is not None else None
