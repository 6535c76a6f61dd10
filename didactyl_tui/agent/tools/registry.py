"""Declare a tool once: name, description, JSON schema, handler, visibility and aliases in one place.

The schema is derived from the handler's signature and docstring (Google-style ``Args:`` section), never
hand-written. A parameter annotated with :class:`ToolContext` is injected and hidden from the schema.
Dispatch, the OpenAI-format tool list and the prompt inspector all read from a :class:`ToolRegistry`.

A tool's error goes back to the model as a readable result (``ToolOutcome.is_error``); it never crashes
the turn. A :class:`ToolPolicy` narrows what one turn may call (a direct message from someone other than the
admin): the tools outside it are not offered, and a call to one is refused with a line the model reads.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from ...errors import AgentError, DidactylError
from ..audience import Audience
from .arguments import check_type, quoted, value_words, words_for


class ToolError(AgentError):
    """Raised by a handler to send a readable error back to the model (like pydantic-ai's ModelRetry)."""

    title = "Tool error"


class ToolContext:
    """Marker base for the object injected into handlers (the service passes its own subclass)."""


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a call produced: ``content`` is exactly what goes back to the model."""

    name: str
    content: str
    is_error: bool = False
    data: Any = None  # the handler's raw return value (for the UI / CLI), None on error
    refused: bool = False  # not run: a policy or a limit refused it (``content`` says why; an error too)
    permission: str = ""  # for a tool that acts: who allowed or denied it (the permission gate's words)


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Which tools the model may call (``allowed`` None: every tool); ``who`` names whose turn it is, for the
    refusal the model reads."""

    allowed: frozenset[str] | None = None
    who: str = "this conversation"

    def permits(self, name: str) -> bool:
        return self.allowed is None or name in self.allowed

    def refusal(self, name: str) -> str:
        return (f"Error: not run: {name} is not available in {self.who}. Do not try another way: tell the person "
                "you cannot do that here.")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[..., Any]
    visible: bool = True  # offered to the LLM; internal tools (context feeders) are not
    aliases: tuple[str, ...] = ()
    family: str = ""
    context_param: str | None = None  # name of the injected ToolContext parameter, if any
    # Who may read what it returns, when it feeds a soul section (agent/audience.py): the admin only unless declared
    # public, so a tool nobody thought about never shows a guest anything.
    audience: Audience = Audience.ADMIN
    # Where it comes from, for the inspector and the permission question ("" built in; "MCP server x").
    origin: str = ""
    # It acts outside the agent's own documents (an MCP server's tool, a file write, a public note): it passes the
    # permission gate (permission.py) before it runs, and is never offered to a guest.
    acts: bool = False

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


# --- schema derivation --------------------------------------------------------------------

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_schema_for(hint: Any) -> dict[str, Any]:
    origin = get_origin(hint)
    if origin is Literal:
        values = list(get_args(hint))
        kind = _JSON_TYPES.get(type(values[0]), "string")
        return {"type": kind, "enum": values}
    if origin in (list, tuple) or hint in (list, tuple):
        args = get_args(hint)
        item = _json_schema_for(args[0]) if args else {}
        return {"type": "array", "items": item}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    raise TypeError(f"unsupported parameter type for a tool: {hint!r}")


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(get_args(hint)) == 2:
            return args[0], True
    return hint, False


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {param: description})."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    parts = re.split(r"^\s*(?:Args|Arguments|Parameters):\s*$", doc, maxsplit=1, flags=re.M)
    description = " ".join(parts[0].split())
    params: dict[str, str] = {}
    if len(parts) == 2:
        current: str | None = None
        for line in parts[1].splitlines():
            if re.match(r"^\s*(Returns|Raises|Yields|Examples?):\s*$", line):
                break
            m = re.match(r"^\s{0,8}(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$", line)
            if m:
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
    return description, params


def build_tool(
    handler: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    visible: bool = True,
    aliases: Iterable[str] = (),
    family: str = "",
    audience: Audience = Audience.ADMIN,
    acts: bool = False,
) -> Tool:
    """Derive a :class:`Tool` from a (sync or async) function's signature and docstring. ``audience``: who may read
    its result in a prompt (Audience.EVERYONE only for what is public); ``acts``: it acts outside the agent's own
    documents (the permission gate asks first)."""
    sig = inspect.signature(handler)
    hints = get_type_hints(handler)
    doc_description, doc_params = parse_docstring(handler.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    context_param: str | None = None
    for pname, param in sig.parameters.items():
        hint = hints.get(pname, str)
        if isinstance(hint, type) and issubclass(hint, ToolContext):
            context_param = pname
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {handler.__name__}: *args/**kwargs are not allowed")
        inner, optional = _unwrap_optional(hint)
        schema = _json_schema_for(inner)
        if pname in doc_params:
            schema["description"] = doc_params[pname]
        if param.default is not inspect.Parameter.empty and param.default is not None:
            schema["default"] = param.default
        properties[pname] = schema
        if param.default is inspect.Parameter.empty and not optional:
            required.append(pname)
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        parameters["required"] = required
    tool_name = name or handler.__name__
    desc = description if description is not None else doc_description
    if not desc:
        raise TypeError(f"tool {tool_name}: a description (docstring) is required")
    return Tool(tool_name, desc, parameters, handler, visible, tuple(aliases), family, context_param, audience,
                acts=acts)


# --- the registry -------------------------------------------------------------------------


@dataclass
class ToolRegistry:
    _tools: dict[str, Tool] = field(default_factory=dict)
    _aliases: dict[str, str] = field(default_factory=dict)
    #: also offer each visible tool's aliases as tools of their own (same description and parameters);
    #: a call by alias runs the tool. Off keeps the list short for small-context models.
    offer_aliases: bool = False
    #: what the model may call through this registry (None: every visible tool); see :meth:`restricted`
    policy: ToolPolicy | None = None

    def restricted(self, policy: ToolPolicy | None) -> ToolRegistry:
        """The same tools under ``policy``: only the permitted ones offered, calls to others refused. Internal
        tools (the prompt's context feeders) still run for the prompt."""
        return self if policy is None else dataclasses.replace(self, policy=policy)

    def permits(self, name: str) -> bool:
        """Whether the model may call ``name`` (a tool or an alias) here."""
        tool = self.get(name)
        return self.policy is None or self.policy.permits(tool.name if tool is not None else name)

    def register(self, tool: Tool) -> Tool:
        for n in (tool.name, *tool.aliases):
            if n in self._tools or n in self._aliases:
                raise ValueError(f"tool name {n!r} is already registered")
        self._tools[tool.name] = tool
        for alias in tool.aliases:
            self._aliases[alias] = tool.name
        return tool

    def unregister(self, name: str) -> Tool | None:
        """Withdraw a tool (an MCP server's, when the server goes away); the tool, or None when there was none."""
        tool = self._tools.pop(name, None)
        if tool is not None:
            for alias in tool.aliases:
                self._aliases.pop(alias, None)
        return tool

    def tool(
        self,
        *,
        name: str | None = None,
        visible: bool = True,
        aliases: Iterable[str] = (),
        family: str = "",
        description: str | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: ``@registry.tool(aliases=("my_npub",))``."""

        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register(
                build_tool(fn, name=name, visible=visible, aliases=aliases, family=family, description=description)
            )
            return fn

        return deco

    def get(self, name: str) -> Tool | None:
        return self._tools.get(self._aliases.get(name, name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def names(self) -> list[str]:
        return list(self._tools)

    def all(self) -> list[Tool]:
        return list(self._tools.values())

    def visible(self) -> list[Tool]:
        """The tools offered to the model (those the policy permits)."""
        return [t for t in self._tools.values() if t.visible and self.permits(t.name)]

    def openai_schemas(self) -> list[dict[str, Any]]:
        """The tool list offered to the LLM: visible tools only, in registration order (each followed by
        its aliases when ``offer_aliases``)."""
        out: list[dict[str, Any]] = []
        for t in self.visible():
            out.append(t.openai_schema())
            if self.offer_aliases:
                out.extend(dataclasses.replace(t, name=alias, aliases=()).openai_schema() for alias in t.aliases)
        return out

    async def call(
        self,
        name: str,
        arguments: str | dict[str, Any] | None,
        ctx: ToolContext | None = None,
        *,
        internal: bool = False,
        also_offered: Sequence[Tool] = (),
    ) -> ToolOutcome:
        """Run a tool by name or alias. Never raises for tool problems: they become an error outcome.

        ``internal=False`` (a call from the model) refuses tools that are not offered to the LLM, and those
        the policy does not permit. ``also_offered``: tools offered beside the registry's (the memory backend's),
        named when the tool is unknown.
        """
        tool = self.get(name)
        if tool is None or (not internal and not tool.visible):
            return ToolOutcome(name, unknown_tool_message(name, [*self.visible(), *also_offered]), True)
        if not internal and self.policy is not None and not self.policy.permits(tool.name):
            return ToolOutcome(name, self.policy.refusal(tool.name), True, refused=True)
        return await invoke(tool, arguments, ctx)


def unknown_tool_message(name: str, offered: Sequence[Tool]) -> str:
    """The model's error for a call to a tool it was not offered: every name it can call, aliases too."""
    names = [t.name + (f" (also {', '.join(t.aliases)})" if t.aliases else "") for t in offered if t.visible]
    listed = ", ".join(names) if names else "none"
    return f"Error: there is no tool {quoted(name)}. The tools you can call: {listed}."


async def invoke(tool: Tool, arguments: str | dict[str, Any] | None, ctx: ToolContext | None) -> ToolOutcome:
    """Validate arguments against the tool's schema, call the handler, render the result for the model."""
    name = tool.name
    if arguments is None or arguments == "":
        args: Any = {}
    elif isinstance(arguments, str):
        try:
            args = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return ToolOutcome(name, f"Error: the arguments for {name} are not valid JSON ({exc.msg}). "
                               "Send a JSON object.", True)
    else:
        args = arguments
    if not isinstance(args, dict):
        return ToolOutcome(name, f"Error: the arguments for {name} must be a JSON object.", True)
    props = tool.parameters.get("properties", {})
    listed = " and ".join(", ".join(quoted(p) for p in props).rsplit(", ", 1)) if props else ""
    unknown = sorted(set(args) - set(props)) if tool.parameters.get("additionalProperties") is False else []
    if unknown:
        which = " or ".join(quoted(u) for u in unknown)
        takes = f"it takes {listed}" if props else "it takes no parameters"
        return ToolOutcome(name, f"Error: {name} has no parameter {which}; {takes}.", True)
    missing = [p for p in tool.parameters.get("required", []) if p not in args]
    if missing:
        needs = "; ".join(f"{quoted(p)} ({words_for(props[p])})" for p in missing)
        return ToolOutcome(name, f"Error: {name} needs {'these parameters' if len(missing) > 1 else 'the parameter'}"
                           f" {needs}.", True)
    for key, value in args.items():
        if not check_type(value, props[key]):
            return ToolOutcome(name, f"Error: the parameter {quoted(key)} of {name} must be "
                               f"{words_for(props[key])}; it was {value_words(value)}.", True)
    if tool.context_param is not None:
        if ctx is None:
            return ToolOutcome(name, f"Error: {name} is not available here (no context).", True)
        args = {**args, tool.context_param: ctx}
    try:
        result = tool.handler(**args)
        if isinstance(result, Awaitable):
            result = await result
    except DidactylError as exc:
        return ToolOutcome(name, f"Error: {exc.message}", True)
    except Exception as exc:  # a tool bug must not crash the turn; the model gets a readable line
        return ToolOutcome(name, f"Error: {name} failed: {type(exc).__name__}: {exc}", True)
    return ToolOutcome(name, render_result(result), False, result)


def render_result(result: Any) -> str:
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)
