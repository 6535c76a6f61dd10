"""One agent turn as an async stream of events: stream the reply, run tool calls, feed results back, repeat.

``run_turn`` persists nothing: :class:`TurnFinished` carries ``new_messages`` (the assistant and tool messages
the caller appends to the conversation). Cancelling the consuming task (the UI's Esc) cancels the model call
and any running tools and propagates ``CancelledError``; nothing is half-written because nothing is written.

Text deltas are coalesced: one :class:`TextDelta` per ``flush_interval_s`` (litellm spends ~0.9 ms per chunk;
a UI refresh per token would cost far more — measured on the 2-core box), flushed by a timer too so a pause in the
stream never holds text back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..llm.client import stream_chat
from ..llm.errors import LlmError
from ..llm.limits import ToolCallGate, TurnLimits, omitted_arguments
from ..llm.types import LlmChunk, LlmSettings, ToolCallDelta
from ..llm.usage import Usage
from ..soul.prompt_record import PromptAssembly
from ..tools.registry import ToolOutcome
from .events import (
    AgentEvent,
    TextComplete,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)

Dispatch = Callable[[str, str], Awaitable[ToolOutcome]]
TEXT_ENDS = ("stop", "length")  # a finish_reason after which no more text comes (a tool call's round goes on)

FINAL_ANSWER_NUDGE = (
    "You have used the maximum number of tool-call rounds for this turn. Do not call any more tools: "
    "answer the user now with what you have."
)


@dataclass
class _PendingCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""
    argument_chars: int = 0  # all that arrived; ``arguments`` stops growing past the limit
    kept: bool = True  # False once the arguments passed the limit (or the call is past the per-reply cap)


@dataclass
class _RoundResult:
    text: str = ""
    calls: list[_PendingCall] = field(default_factory=list)
    calls_made: int = 0  # how many calls the reply asked for (``calls`` keeps the first per-reply-cap of them)
    usage: Usage | None = None
    finish_reason: str | None = None
    cut: str | None = None  # why the reply was cut short (a bound was reached), shown to the user


def _add_usage(total: Usage, more: Usage | None) -> Usage:
    if more is None:
        return total

    def plus(a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return a + b

    return Usage(plus(total.prompt_tokens, more.prompt_tokens), plus(total.completion_tokens, more.completion_tokens),
                 plus(total.cost_usd, more.cost_usd),
                 more.prompt_tokens if more.prompt_tokens is not None else total.last_prompt_tokens)


def _history_arguments(raw: str) -> str:
    """Arguments as kept in the conversation: malformed JSON becomes "{}" (the tool result explains the error),
    because some providers refuse a history whose tool-call arguments do not parse."""
    if not raw.strip():
        return "{}"
    try:
        json.loads(raw)
    except ValueError:
        return "{}"
    return raw


def parse_arguments(raw: str) -> dict[str, Any]:
    """The arguments as a dict for events and the UI; malformed JSON is kept raw under ``_raw``."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def _take_call_delta(calls: dict[int, _PendingCall], parts: dict[int, list[str]], delta: ToolCallDelta,
                     limits: TurnLimits, result: _RoundResult) -> None:
    """Add one tool-call fragment; arguments past the size limit, and calls past the per-reply cap, are
    counted but not kept (so a hostile reply cannot grow our memory)."""
    result.calls_made = max(result.calls_made, delta.index + 1, len(calls))
    call = calls.get(delta.index)
    if call is None:
        if len(calls) >= limits.max_tool_calls_per_reply:
            return
        call = calls[delta.index] = _PendingCall(delta.index)
        parts[delta.index] = []
    if delta.id:
        call.id = delta.id[:200]
    if delta.name and delta.name != call.name and len(call.name) < 200:
        # Most servers send the whole name once; a few split it across fragments.
        call.name += delta.name
    call.argument_chars += len(delta.arguments)
    if call.kept and call.argument_chars > limits.max_tool_argument_chars:
        call.kept = False
        parts[delta.index] = []  # refused: free what arrived
    elif call.kept and delta.arguments:
        parts[delta.index].append(delta.arguments)


async def _stream_round(
    settings: LlmSettings,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    result: _RoundResult,
    flush_interval_s: float,
    deadline: float,
) -> AsyncIterator[TextDelta | TextComplete]:
    """Stream one model call into ``result``, yielding coalesced text deltas on the way, and :class:`TextComplete`
    (after the text so far) when the model says its text is whole.

    The reply is cut (``result.cut`` says why) when what it sent passes ``max_reply_chars`` or the turn's
    ``deadline`` (time.monotonic) passes; the stream is closed then, so the server stops sending.
    """
    limits = settings.limits
    stream = stream_chat(settings, messages, tools)
    calls: dict[int, _PendingCall] = {}
    parts: dict[int, list[str]] = {}
    buffer: list[str] = []
    text_parts: list[str] = []
    received = 0
    last_flush = -float("inf")
    next_chunk: asyncio.Task[LlmChunk] | None = None
    deadline_cut = f"the turn reached its {limits.turn_timeout_s:g} s limit ([llm] turn_timeout_s)"
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                result.cut = deadline_cut
                break
            if next_chunk is None:
                next_chunk = asyncio.ensure_future(anext(stream))
            timeout = deadline - now
            if buffer:
                timeout = min(timeout, max(0.0, last_flush + flush_interval_s - now))
            done, _ = await asyncio.wait({next_chunk}, timeout=timeout)
            if not done:
                if buffer:  # the stream paused with text waiting: flush it on the timer
                    yield TextDelta("".join(buffer))
                    buffer.clear()
                    last_flush = time.monotonic()
                continue
            task, next_chunk = next_chunk, None
            try:
                chunk = task.result()
            except StopAsyncIteration:
                break
            except LlmError:
                if buffer:  # show what did arrive before the failure
                    yield TextDelta("".join(buffer))
                    buffer.clear()
                raise
            if chunk.text:
                piece = chunk.text[: max(0, limits.max_reply_chars - received)]
                received += len(chunk.text)
                if piece:
                    buffer.append(piece)
                    text_parts.append(piece)
            for delta in chunk.tool_calls:
                # A fragment counts at least one character, so an endless run of empty fragments is bounded too.
                received += max(1, len(delta.arguments) + len(delta.name or ""))
                _take_call_delta(calls, parts, delta, limits, result)
            if chunk.finish_reason:
                if result.finish_reason is None and chunk.finish_reason in TEXT_ENDS and not calls:
                    if buffer:
                        yield TextDelta("".join(buffer))
                        buffer.clear()
                        last_flush = time.monotonic()
                    yield TextComplete()
                result.finish_reason = chunk.finish_reason
            if chunk.usage is not None:
                result.usage = chunk.usage
            if received > limits.max_reply_chars:
                result.cut = f"the reply passed {limits.max_reply_chars:,} characters ([llm] max_reply_chars)"
                break
            if buffer and time.monotonic() - last_flush >= flush_interval_s:
                yield TextDelta("".join(buffer))
                buffer.clear()
                last_flush = time.monotonic()
        if buffer:
            yield TextDelta("".join(buffer))
            buffer.clear()
    finally:
        if next_chunk is not None and not next_chunk.done():
            next_chunk.cancel()
            # wait() does not re-raise the task's CancelledError, but a cancel of *this* task still propagates.
            await asyncio.wait({next_chunk})
        with contextlib.suppress(Exception):
            await stream.aclose()
    result.text = "".join(text_parts)
    for index, call in calls.items():
        call.arguments = "".join(parts[index])
    result.calls = [calls[i] for i in sorted(calls)]


async def _run_tools(
    calls: list[_PendingCall], refusals: list[str | None], dispatch: Dispatch, round_no: int
) -> AsyncIterator[tuple[int, ToolOutcome]]:
    """Run independent calls concurrently (TaskGroup); yield (index, outcome) as each finishes.
    A refused call is not run: its refusal is its (error) outcome."""
    queue: asyncio.Queue[tuple[int, ToolOutcome]] = asyncio.Queue()

    async def run_one(i: int, call: _PendingCall) -> None:
        refusal = refusals[i]
        if refusal is not None:
            queue.put_nowait((i, ToolOutcome(call.name, refusal, True, refused=True)))
            return
        try:
            outcome = await dispatch(call.name, call.arguments)
        except Exception as exc:  # dispatch should not raise; if it does, the model still gets a readable result
            outcome = ToolOutcome(call.name, f"Error: {call.name} failed: {type(exc).__name__}: {exc}", True)
        queue.put_nowait((i, outcome))

    async def run_all() -> None:
        async with asyncio.TaskGroup() as group:
            for i, call in enumerate(calls):
                group.create_task(run_one(i, call), name=f"tool:{call.name}:{round_no}")

    runner = asyncio.ensure_future(run_all())
    getter: asyncio.Future[tuple[int, ToolOutcome]] | None = None
    try:
        for _ in calls:
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, runner}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                # The runner ended without delivering every result (it was cancelled): surface that.
                await runner
                raise asyncio.CancelledError
            yield getter.result()
            getter = None
        await runner
    finally:
        pending = [t for t in (getter, runner) if t is not None and not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)


async def run_turn(
    *,
    settings: LlmSettings,
    assembly: PromptAssembly,
    dispatch: Dispatch,
    session_id: str,
    max_tool_rounds: int,
    flush_interval_s: float = 0.04,
    limits: TurnLimits | None = None,
) -> AsyncIterator[AgentEvent]:
    """Run one turn of the agent on an assembled prompt; see the module docstring.

    ``dispatch(name, arguments_json)`` runs one tool call and never raises for tool problems (unknown tool,
    malformed arguments, a failing handler: an error ``ToolOutcome`` the model reads). LLM errors end the
    turn with :class:`TurnFailed` (one line, ``retryable``); they are never raised.

    ``limits`` (default ``settings.limits``) bound the turn: a reply cut at a bound ends the turn with
    :class:`TurnFinished` whose ``cut`` says why (its text kept and marked, its tool calls not run); tool
    calls over a count or size limit are answered with a refusal the model reads and are never stored.
    """
    if limits is not None:
        settings = dataclasses.replace(settings, limits=limits)
    limits = settings.limits
    deadline = time.monotonic() + limits.turn_timeout_s
    gate = ToolCallGate(limits)
    yield TurnStarted(session_id, assembly)
    messages: list[dict[str, Any]] = [dict(m) for m in assembly.messages]
    tools = [dict(t) for t in assembly.tools] or None
    new_messages: list[dict[str, Any]] = []
    finished_calls: list[ToolCallFinished] = []
    usage = Usage()
    rounds = 0
    text_shown = False
    max_tool_rounds = max(0, max_tool_rounds)

    while True:
        rounds += 1
        final_round = rounds > max_tool_rounds
        request_messages = messages
        offered = tools
        if final_round and tools:
            # Out of tool rounds: ask for an answer without offering tools (the nudge is not persisted).
            request_messages = [*messages, {"role": "system", "content": FINAL_ANSWER_NUDGE}]
            offered = None
        result = _RoundResult()
        first_in_round = True
        try:
            async for delta in _stream_round(settings, request_messages, offered, result, flush_interval_s,
                                             deadline):
                if isinstance(delta, TextComplete):
                    yield delta
                    continue
                if first_in_round and text_shown:
                    # Text from an earlier round (e.g. "Let me check.") is on screen: start a new paragraph.
                    delta = TextDelta("\n\n" + delta.text)
                first_in_round = False
                text_shown = True
                yield delta
        except LlmError as err:
            yield TurnFailed(session_id, err.message, title=err.title, retryable=err.retryable)
            return
        usage = _add_usage(usage, result.usage)

        if result.cut is not None:
            dropped = f"; its {result.calls_made:,} tool call(s) were not run" if offered and result.calls_made else ""
            marker = f"[reply cut short: {result.cut}{dropped}]"
            separator = "\n\n" if text_shown else ""
            yield TextDelta(separator + marker)
            reply = result.text + ("\n\n" if result.text else "") + marker
            new_messages.append({"role": "assistant", "content": reply})
            yield TurnFinished(session_id, reply, list(finished_calls), usage, rounds, list(new_messages),
                               cut=result.cut)
            return

        calls = result.calls if offered else []
        if not calls:
            reply = result.text
            if not reply.strip() and final_round and tools:
                reply = (f"(I stopped after {max_tool_rounds} rounds of tool calls without reaching an answer. "
                         "Ask again or narrow the question.)")
            new_messages.append({"role": "assistant", "content": reply})
            yield TurnFinished(session_id, reply, list(finished_calls), usage, rounds, list(new_messages))
            return

        for n, call in enumerate(calls):
            if not call.id:
                call.id = f"call_{rounds}_{n}"
        refusals = [gate.refusal(c.name, c.argument_chars) for c in calls]
        kept_arguments = [omitted_arguments(c.argument_chars) if refused else _history_arguments(c.arguments)
                          for c, refused in zip(calls, refusals, strict=True)]
        new_messages.append({
            "role": "assistant",
            "content": result.text or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}}
                for c, arguments in zip(calls, kept_arguments, strict=True)
            ],
        })
        arguments = [parse_arguments(c.arguments if refused is None else kept)
                     for c, refused, kept in zip(calls, refusals, kept_arguments, strict=True)]
        for call, args in zip(calls, arguments, strict=True):
            yield ToolCallStarted(call.id, call.name, args, rounds)
        finished_this_round: list[ToolCallFinished | None] = [None] * len(calls)
        async for i, outcome in _run_tools(calls, refusals, dispatch, rounds):
            call = calls[i]
            finished = ToolCallFinished(call.id, call.name, arguments[i], outcome.content, outcome.is_error, rounds,
                                        outcome.refused, outcome.permission)
            finished_this_round[i] = finished
            yield finished
        # Results go back in the order the model asked for them, whatever order they finished in.
        for n, answered in enumerate(finished_this_round):
            assert answered is not None
            finished_calls.append(answered)
            content = answered.result
            if n == len(calls) - 1 and result.calls_made > len(calls):
                content += gate.excess_note(result.calls_made)
            new_messages.append({"role": "tool", "tool_call_id": answered.call_id, "content": content})
        messages = [dict(m) for m in assembly.messages] + [dict(m) for m in new_messages]
        if time.monotonic() >= deadline:
            cut = f"the turn reached its {limits.turn_timeout_s:g} s limit ([llm] turn_timeout_s)"
            marker = f"[turn stopped: {cut}, after its tool calls ran]"
            yield TextDelta(("\n\n" if text_shown else "") + marker)
            new_messages.append({"role": "assistant", "content": marker})
            yield TurnFinished(session_id, marker, list(finished_calls), usage, rounds, list(new_messages), cut=cut)
            return
