"""The permission gate as the service runs it (agent/tools/permission.py decides): the gate built from the config,
the tools the person always allows kept in ``state.toml`` (read and written on worker threads), where a turn is (the
session's kind and audience), what such a turn is offered, and each model call of a tool that acts passed through
the gate. The app's dialog and an ACP client register themselves as who asks (``register_asker``)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from ..agent.audience import TurnAudience
from ..agent.conversations.session_kind import SessionKind
from ..agent.tools.permission import PermissionGate, Where
from ..agent.tools.registry import ToolOutcome, ToolPolicy, ToolRegistry
from ..config import Config
from .state import read_state, remember

ALWAYS_KEY = "always_allowed_tools"  # in state.toml: the tools the person allowed for good


def permission_gate(config: Config, allow: Iterable[str] = ()) -> PermissionGate:
    """The gate of ``[permissions]`` (and ``[tools] post_notes_without_asking``), plus ``allow`` (``--allow``)."""
    allowed = [*config.permissions.allow, *allow]
    if config.tools.post_notes_without_asking:
        allowed.append("post_note")
    return PermissionGate(allowed, admin_dms=config.permissions.admin_dms)


async def keep_always(gate: PermissionGate, data_dir: Path) -> Callable[[], None]:
    """Load the tools always allowed from state.toml into ``gate`` and keep each change there (a worker thread);
    returns how to stop keeping them."""
    stored = await asyncio.to_thread(lambda: read_state(data_dir).get(ALWAYS_KEY, []))
    if isinstance(stored, list):
        gate.allow_always(str(name) for name in stored)
    writes: set[asyncio.Task[None]] = set()

    def changed(always: frozenset[str]) -> None:
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(remember, data_dir, ALWAYS_KEY, sorted(always)))
        writes.add(task)
        task.add_done_callback(writes.discard)

    return gate.add_listener(changed)


def where_of(kind: SessionKind | None, audience: TurnAudience) -> Where:
    """Who could give leave in a turn of ``kind`` for ``audience`` (no kind: a call made outside a turn)."""
    if not audience.admin or kind is SessionKind.DM_GUEST:
        return Where.GUEST
    if kind is SessionKind.TERMINAL:
        return Where.PERSON
    if kind is SessionKind.DM:
        return Where.ADMIN_DM
    return Where.NOBODY


def turn_registry(registry: ToolRegistry, gate: PermissionGate, where: Where) -> ToolRegistry:
    """``registry`` as one turn may use it: a guest is offered no tool that acts; the admin's direct messages only
    those the config allows there; elsewhere every tool (the gate asks when one is called)."""
    acting = [t for t in registry.all() if t.acts]
    withheld = {t.name for t in acting if not gate.offered(t.name, where)}
    if not withheld:
        return registry
    permitted = frozenset(t.name for t in registry.all() if t.name not in withheld and registry.permits(t.name))
    who = registry.policy.who if registry.policy is not None else "this conversation"
    return registry.restricted(ToolPolicy(permitted, who))


async def gated(gate: PermissionGate, registry: ToolRegistry, name: str, arguments: str | dict[str, Any] | None,
                where: Where, run: Callable[[], Awaitable[ToolOutcome]]) -> ToolOutcome:
    """``run()`` the call of ``name`` if the gate allows it (a tool that does not act: at once); the verdict's words
    go with the outcome (the conversation and the inspector show them)."""
    tool = registry.get(name)
    if tool is None or not tool.acts or not registry.permits(tool.name):
        return await run()  # unknown, not acting, or refused by the turn's policy: the registry says why
    verdict = await gate.check(tool, arguments, where)
    if not verdict.allowed:
        return ToolOutcome(tool.name, verdict.refusal(tool.name), True, refused=True, permission=verdict.how)
    return dataclasses.replace(await run(), permission=verdict.how)

