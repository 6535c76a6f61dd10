"""Task tools: the agent's own task list (kind 30078 ``d = tasks``, NIP-44 to itself).

Every change goes through :class:`TaskBook`, which saves before the change becomes current.
``tasks_open_read`` is internal: it feeds the soul's ``tasks`` section (open tasks; empty when none, so
the section is skipped) and is never offered to the model.
"""

from __future__ import annotations

from typing import Any, Literal

from ..tasks.task_list import Task, TaskBook
from .context import AgentToolContext
from .registry import Tool, ToolError, build_tool


def _book(ctx: AgentToolContext) -> TaskBook:
    if ctx.tasks is None:
        raise ToolError("the task list is not available here")
    return ctx.tasks


def _result(action: str, task: Task) -> dict[str, Any]:
    return {action: task.to_dict()}


def task_list(ctx: AgentToolContext, include_closed: bool = False) -> dict[str, Any]:
    """List your tasks (open and in progress; closed ones too when asked).

    Args:
        include_closed: Also list tasks that are done or cancelled.
    """
    current = _book(ctx).current
    tasks = current.tasks if include_closed else tuple(current.open_tasks())
    out: dict[str, Any] = {"tasks": [t.to_dict() for t in tasks]}
    if not tasks:
        out["note"] = "You have no tasks." if include_closed or not current.tasks else "You have no open tasks."
    return out


async def task_add(title: str, ctx: AgentToolContext, note: str = "") -> dict[str, Any]:
    """Add a task to your task list (saved to your relays, shown to you in every prompt while open).

    Args:
        title: What is to be done, in one line.
        note: Optional details or context.
    """
    return _result("added", await _book(ctx).add(title, note))


async def task_update(
    id: int,
    ctx: AgentToolContext,
    status: Literal["open", "in_progress", "done", "cancelled"] | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """Change a task's status or note (give at least one).

    Args:
        id: The task's number, as task_list shows it.
        status: The new status: "open", "in_progress", "done" or "cancelled".
        note: A new note, replacing the old one.
    """
    return _result("updated", await _book(ctx).update(id, status=status, note=note))


async def task_remove(id: int, ctx: AgentToolContext) -> dict[str, Any]:
    """Remove a task from your task list for good (mark it done instead to keep a record).

    Args:
        id: The task's number, as task_list shows it.
    """
    return _result("removed", await _book(ctx).remove(id))


def tasks_open_read(ctx: AgentToolContext) -> dict[str, str]:
    """Your open tasks, as shown in the prompt (internal: feeds the tasks section)."""
    return {"content": _book(ctx).current.render_open()}


TASK_TOOLS: tuple[Tool, ...] = (
    build_tool(task_list, family="tasks"),
    build_tool(task_add, family="tasks"),
    build_tool(task_update, family="tasks"),
    build_tool(task_remove, family="tasks"),
    build_tool(tasks_open_read, visible=False, family="tasks"),
)
