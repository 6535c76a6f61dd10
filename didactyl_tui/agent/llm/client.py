"""The one door to the language model: litellm, imported lazily, with our own retry policy.

This is the only module that imports litellm, and only inside functions: the import costs ~8 s and ~200 MiB
(measured on the 2-core box; bench/idle_rss_bench.py), so the UI paints first and ``preload()`` runs in a background
thread.

``stream_chat`` yields :class:`LlmChunk` objects (text deltas, tool-call deltas, the finish reason, usage).
litellm's own retries are off (``max_retries=0``: one failing call would otherwise become three requests);
ours retry a rate limit after its Retry-After (capped) and server or connection errors with backoff, and
never once output has been streamed. Every failure becomes an :class:`LlmError` with a ``kind`` and one
readable line — no traceback, never the API key.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from typing import Any

from ...actions import no_model_line
from . import tokens
from .errors import (
    LlmError,
    classify,
    retry_delay,
    where,
)
from .types import LlmChunk, LlmSettings, ToolCallDelta
from .usage import Usage

log = logging.getLogger("didactyl.llm")

# --- the lazy import --------------------------------------------------------------------------

_import_lock = threading.Lock()
_litellm: Any = None
_windows: dict[str, int | None] = {}  # the model table's context window of each model asked about (litellm here)


def preload() -> None:
    """Import and configure litellm (slow: call it from a background thread, e.g. ``asyncio.to_thread``)."""
    _load()


def use_helper(idle_exit_s: float | None = None) -> None:
    """The model client runs in the helper process (``llm.worker``), started when a model is first needed
    (:func:`start_worker`) and stopped after ``idle_exit_s`` unused (None: as set before). Token counts are made
    there from now on (``llm.tokens``: this process loads no tokenizer; while no helper runs they are estimates).
    Starts nothing."""
    from .worker_client import worker

    helper = worker()
    if idle_exit_s is not None:
        helper.idle_exit_s = idle_exit_s
    tokens.use_remote_counter(helper.count_texts)


def start_worker(idle_exit_s: float | None = None) -> None:
    """Start the helper process that streams model replies (``llm.worker``) unless it runs: it imports litellm at
    once, so the turn on its way finds it warm (:func:`use_helper`). Blocking (a process starts): from a thread."""
    from .worker_client import worker

    use_helper(idle_exit_s)
    worker().start()


async def helper_ready(timeout: float, *, start: bool = False) -> None:
    """When the helper is still importing litellm, wait until it is done (or failed, or died; at most ``timeout``):
    a turn's prompt is counted there, and the turn waits for the import anyway. With ``start`` (a turn or a dry run
    needs the model) it is started first when it does not run. Returns at once otherwise."""
    from .worker_client import worker

    helper = worker()
    if start and _litellm is None and not helper.running:
        await asyncio.to_thread(start_worker)
    if _litellm is None and helper.running and not helper.settled.is_set():
        await asyncio.to_thread(helper.settled.wait, timeout)


def should_preload(settings: LlmSettings) -> bool:
    """Whether to import litellm ahead of the first turn: only when a model is configured (the import costs
    ~200 MiB of RSS; with no model there is no turn to win time for)."""
    return settings.configured


def is_loaded() -> bool:
    return _litellm is not None


def _load() -> Any:
    global _litellm
    if _litellm is not None:
        return _litellm
    with _import_lock:
        if _litellm is None:
            # Use the bundled model cost map: no network fetch (and no retries of it) at import.
            os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
            t0 = time.perf_counter()
            import litellm

            litellm.suppress_debug_info = True  # no "Provider List..." on stdout under the TUI
            litellm.drop_params = True  # e.g. stream_options for a provider that lacks it: dropped, not fatal
            logging.getLogger("LiteLLM").setLevel(logging.WARNING)
            _litellm = litellm
            log.info("litellm %s imported in %.1f s", getattr(litellm, "version", "?"), time.perf_counter() - t0)
    return _litellm


async def _load_async() -> Any:
    if _litellm is not None:
        return _litellm
    return await asyncio.to_thread(_load)


def count_tokens(model: str, text_or_messages: str | Iterable[Mapping[str, Any]]) -> int:
    """Token count (``llm.tokens``: tiktoken's cl100k_base, in the helper process when it runs)."""
    return tokens.count_tokens_any(model, text_or_messages)


def cost_usd(model: str, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
    """What a call cost by litellm's price table, or None when the model is unknown (or litellm not loaded)."""
    if _litellm is None or prompt_tokens is None or completion_tokens is None:
        return None
    try:
        prompt_cost, completion_cost = _litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # unknown model: no price, not an error
        return None
    total = float(prompt_cost) + float(completion_cost)
    return total


def context_window(model: str) -> int | None:
    """How many prompt tokens ``model`` takes, by litellm's model table (here, or in the helper process when
    litellm runs there); None when unknown, or not loaded yet. Blocking (a round trip to the helper): from a worker
    thread; the answer is kept for :func:`known_context_window`."""
    if not model:
        return None
    if _litellm is None:
        from .worker_client import worker

        helper = worker()
        return helper.context_window(model) if helper.running else None
    if model not in _windows:
        try:
            info = _litellm.get_model_info(model)
        except Exception:  # unknown model: no window, not an error
            info = {}
        window = info.get("max_input_tokens") or info.get("max_tokens")
        _windows[model] = int(window) if isinstance(window, int | float) and window > 0 else None
    return _windows[model]


def known_context_window(model: str) -> int | None:
    """What :func:`context_window` answered for ``model`` before, never waiting (for a view on the event loop);
    None when unknown or not asked yet."""
    if not model:
        return None
    if model in _windows:
        return _windows[model]
    from .worker_client import worker

    return worker().known_context_window(model)


def map_error(exc: BaseException, settings: LlmSettings) -> LlmError:
    """Turn anything a model call raised into an :class:`LlmError` with one readable line."""
    return classify(exc, settings, _litellm)


# --- streaming ----------------------------------------------------------------------------------


def _convert(raw: Any, model: str) -> LlmChunk:
    text = ""
    calls: list[ToolCallDelta] = []
    finish: str | None = None
    choices = getattr(raw, "choices", None) or ()
    if choices:
        choice = choices[0]
        finish = getattr(choice, "finish_reason", None)
        delta = getattr(choice, "delta", None)
        if delta is not None:
            text = getattr(delta, "content", None) or ""
            for n, tc in enumerate(getattr(delta, "tool_calls", None) or ()):
                fn = getattr(tc, "function", None)
                index = getattr(tc, "index", None)
                calls.append(ToolCallDelta(
                    index=index if isinstance(index, int) else n,
                    id=getattr(tc, "id", None) or None,
                    name=(getattr(fn, "name", None) or None) if fn is not None else None,
                    arguments=(getattr(fn, "arguments", None) or "") if fn is not None else "",
                ))
    usage = None
    raw_usage = getattr(raw, "usage", None)
    if raw_usage is not None:
        prompt = getattr(raw_usage, "prompt_tokens", None)
        completion = getattr(raw_usage, "completion_tokens", None)
        usage = Usage(prompt, completion, cost_usd(model, prompt, completion))
    return LlmChunk(text, tuple(calls), finish, usage)


async def stream_chat(
    settings: LlmSettings,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> AsyncGenerator[LlmChunk, None]:
    """Stream one completion. Raises :class:`LlmError`; cancellation propagates as CancelledError.

    With ``settings.worker_process`` (the default) litellm runs in the helper process and this loop only
    receives its chunks; otherwise here, as ``stream_in_process``."""
    if not settings.configured:
        raise LlmError(no_model_line(), "not_configured")
    if settings.worker_process:
        from .worker_client import worker

        stream = worker().stream(settings, messages, tools)
    else:
        stream = stream_in_process(settings, messages, tools)
    try:
        async for chunk in stream:
            yield chunk
    finally:
        await stream.aclose()


async def stream_in_process(
    settings: LlmSettings,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> AsyncGenerator[LlmChunk, None]:
    """Stream one completion with litellm on this event loop (the helper process runs this)."""
    if not settings.configured:
        raise LlmError(no_model_line(), "not_configured")
    litellm = await _load_async()
    kwargs: dict[str, Any] = {
        "model": settings.model,
        "messages": [dict(m) for m in messages],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_retries": 0,  # litellm's client would retry twice on its own: our policy decides
        "timeout": settings.timeout_s,
    }
    if settings.api_base:
        kwargs["api_base"] = settings.api_base
    if settings.max_tokens:
        kwargs["max_tokens"] = settings.max_tokens
    if settings.api_key:
        kwargs["api_key"] = settings.api_key
    if tools:
        kwargs["tools"] = [dict(t) for t in tools]

    attempt = 0
    while True:
        streamed = False
        stream: Any = None
        try:
            try:
                # The client's own timeout covers connect and read; this bounds the whole opening too.
                async with asyncio.timeout(settings.timeout_s + 1.0):
                    stream = await litellm.acompletion(**kwargs)
                iterator = stream.__aiter__()
                while True:
                    try:
                        # Idle timeout between chunks: a server that stalls mid-stream fails in bounded time.
                        async with asyncio.timeout(settings.timeout_s):
                            raw = await iterator.__anext__()
                    except StopAsyncIteration:
                        break
                    chunk = _convert(raw, settings.model)
                    if chunk.text or chunk.tool_calls:
                        streamed = True
                    yield chunk
                return
            finally:
                if stream is not None and hasattr(stream, "aclose"):
                    try:
                        await stream.aclose()
                    except Exception as close_exc:
                        log.debug("closing the stream failed: %s", close_exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            err = map_error(exc, settings)
        if streamed:
            # Output already reached the user: a retry would duplicate it. The user may retry the turn.
            why = (f"the connection to {where(settings)} dropped." if err.kind == "connection" else err.message)
            raise LlmError(f"The reply was cut off: {why}", err.kind, retry_after=err.retry_after, status=err.status)
        delay = retry_delay(err, attempt, settings)
        if delay is None:
            raise err
        attempt += 1
        log.info("model call failed (%s); retry %d of %d in %.2f s", err.kind, attempt, settings.max_retries, delay)
        await asyncio.sleep(delay)
