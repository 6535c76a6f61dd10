"""The permission gate: nothing acts on the world without someone's leave.

A tool declared ``acts`` (it acts outside the agent's own documents: an MCP server's tools, ``write_file``,
``post_note``) passes the gate before it runs; every other tool runs as before. Who gives leave, by where the turn is:

- a guest's conversation: nobody — such a tool is never offered to a guest nor run for one, whatever the config says;
- a turn with someone to ask (the app's terminal, an editor over ACP): the person, shown the tool, where it comes from
  and its arguments (cleaned, bounded): allow once, always allow this tool (kept, revocable), or deny;
- a turn with nobody to ask (a headless command, ``serve``, the admin's direct messages): denied, unless the config
  (``[permissions] allow``, or ``--allow NAME`` for one command) allows the tool — in the admin's direct messages only
  with ``[permissions] admin_dms``.

Each decision is a :class:`Verdict` whose words go into the tool's result (the conversation and the inspector show
it). The gate is the one place this is decided: ``post_note``'s confirmation is this gate's question.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ...terminal_text import clean
from .registry import Tool

MAX_SHOWN_ARGUMENTS = 2000  # characters of a call's arguments shown when asking


class Decision(str, Enum):
    ONCE = "allow_once"
    ALWAYS = "allow_always"
    DENY = "deny"


class Where(str, Enum):
    """Who could give leave for one turn's call."""

    PERSON = "person"  # someone is there to ask (the app's terminal, an ACP client)
    NOBODY = "nobody"  # a headless command or serve: the config decides
    ADMIN_DM = "admin_dm"  # the admin's own direct messages: the config decides, if [permissions] admin_dms
    GUEST = "guest"  # anyone else's conversation: never


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """What the person is asked: ``tool``, where it comes from (``origin``), its arguments as shown."""

    tool: str
    origin: str
    arguments: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    how: str  # e.g. "allowed once by you", "denied: nobody here can allow it" — shown beside the call

    def refusal(self, tool: str) -> str:
        """What the model reads for a denied call."""
        return f"Error: not run: {tool} was {self.how}. Do not try another way: tell the person what you wanted to do."


Ask = Callable[[PermissionRequest], Awaitable[Decision]]


def origin_of(tool: Tool) -> str:
    """Where a tool comes from, in a person's words: "didactyl" (built in), "MCP server x", "memory backend"."""
    return tool.origin or "didactyl"


def shown_arguments(arguments: str | dict[str, Any] | None, limit: int = MAX_SHOWN_ARGUMENTS) -> str:
    """A call's arguments as a person reads them: JSON, indented, cleaned of control characters, cut at ``limit``."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            pass
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, indent=2, ensure_ascii=False)
    text = clean(text)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit:,} more characters)"


def pattern_allows(patterns: Iterable[str], name: str) -> bool:
    """Whether ``name`` is allowed by one of ``patterns``: a tool's name, or ``server__*`` for a server's tools."""
    for pattern in patterns:
        if pattern == name or (pattern.endswith("__*") and name.startswith(pattern[:-1])):
            return True
    return False


class PermissionGate:
    """Leave for tools that act. ``allow``: what the config (and ``--allow``) allows; ``admin_dms``: whether that
    holds in the admin's direct messages; ``always``: the tools the person allowed for good (the service keeps them
    in state.toml and listens for changes)."""

    def __init__(self, allow: Iterable[str] = (), *, admin_dms: bool = False, always: Iterable[str] = ()) -> None:
        self.allow = tuple(allow)
        self.admin_dms = admin_dms
        self._always = set(always)
        self._ask: Ask | None = None
        self._listeners: list[Callable[[frozenset[str]], object]] = []

    # --- who asks ---------------------------------------------------------------------------------
    def register_asker(self, ask: Ask) -> Callable[[], None]:
        """A view that can ask the person (the app's dialog, an ACP client) registers here; the returned function
        withdraws it."""
        self._ask = ask

        def withdraw() -> None:
            if self._ask is ask:
                self._ask = None

        return withdraw

    @property
    def can_ask(self) -> bool:
        return self._ask is not None

    # --- "always" ---------------------------------------------------------------------------------
    @property
    def always(self) -> frozenset[str]:
        return frozenset(self._always)

    def add_listener(self, cb: Callable[[frozenset[str]], object]) -> Callable[[], None]:
        """``cb(always)`` after each change of the tools allowed for good."""
        self._listeners.append(cb)

        def withdraw() -> None:
            if cb in self._listeners:
                self._listeners.remove(cb)

        return withdraw

    def allow_always(self, names: Iterable[str]) -> None:
        """Take the tools kept as always allowed (state.toml, read at start); no listener is told."""
        self._always.update(names)

    def revoke(self, name: str) -> bool:
        """Ask again before ``name`` acts (it was allowed for good); False when it was not."""
        if name not in self._always:
            return False
        self._always.discard(name)
        self._changed()
        return True

    def _changed(self) -> None:
        for cb in list(self._listeners):
            cb(self.always)

    # --- the decision -----------------------------------------------------------------------------
    def offered(self, name: str, where: Where) -> bool:
        """Whether the tool that acts ``name`` is offered there: never to a guest; in the admin's direct messages
        only what the config allows there; elsewhere always (asked, or refused, when called)."""
        if where is Where.GUEST:
            return False
        if where is Where.ADMIN_DM:
            return self.admin_dms and pattern_allows(self.allow, name)
        return True

    async def check(self, tool: Tool, arguments: str | dict[str, Any] | None, where: Where) -> Verdict:
        """Whether ``tool`` may run this call now; asks the person when someone is there and nothing decided it."""
        if not tool.acts:
            return Verdict(True, "a tool that does not act outside the agent's documents")
        name = tool.name
        if where is Where.GUEST:
            return Verdict(False, "denied: a guest's conversation never gets tools that act")
        if where is Where.ADMIN_DM:
            if self.admin_dms and pattern_allows(self.allow, name):
                return Verdict(True, "allowed by [permissions] allow or --allow")
            return Verdict(False, "denied: nobody is here to allow it in a direct message ([permissions] allow "
                                  "and admin_dms)")
        if pattern_allows(self.allow, name):
            return Verdict(True, "allowed by [permissions] allow or --allow")
        if name in self._always:
            return Verdict(True, "allowed: you always allow it")
        ask = self._ask
        if where is Where.NOBODY or ask is None:
            return Verdict(False, "denied: nobody here can allow it ([permissions] allow, or --allow " + name + ")")
        request = PermissionRequest(name, origin_of(tool), shown_arguments(arguments), clean(tool.description)[:500])
        decision = await ask(request)
        if decision is Decision.ALWAYS:
            self._always.add(name)
            self._changed()
            return Verdict(True, "allowed by you, always")
        if decision is Decision.ONCE:
            return Verdict(True, "allowed once by you")
        return Verdict(False, "denied by you")
