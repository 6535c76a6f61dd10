"""The one door to the language model: litellm, imported lazily, with our own retry policy.

This is the only module that imports litellm, and only inside functions: the import costs ~8 s and
~200 MiB (FACTS.md), so the UI paints first and ``preload()`` runs in a background thread.

``stream_chat`` yields :class:`LlmChunk` objects (text deltas, tool-call deltas, the finish reason, usage).
litellm's own retries are off (``max_retries=0``: one failing call would otherwise become three requests);
ours retry a rate limit after its Retry-After (capped) and server or connection errors with backoff, and
never once output has been streamed. Every failure becomes an :class:`LlmError` with a ``kind`` and one
readable line — no traceback, never the API key.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import AgentError
from . import tokens
from .events import Usage
from .limits import TurnLimits

log = logging.getLogger("didactyl.llm")

ERROR_KINDS = ("auth", "rate_limit", "timeout", "context_length", "server", "bad_request", "connection",
               "not_configured")
# Kinds worth pressing "retry" for (the user's retry, not ours).
RETRYABLE_KINDS = frozenset({"rate_limit", "timeout", "server", "connection"})
# Kinds our own policy retries automatically (before any output was streamed).
_AUTO_RETRY_KINDS = frozenset({"rate_limit", "server", "connection"})

_TITLES = {
    "auth": "LLM authentication failed",
    "rate_limit": "LLM rate limited",
    "timeout": "LLM timed out",
    "context_length": "Conversation too long",
    "server": "LLM server error",
    "bad_request": "LLM refused the request",
    "connection": "LLM unreachable",
    "not_configured": "No model configured",
}


class LlmError(AgentError):
    """A failed model call: ``kind`` says what went wrong, ``message`` is the one line the user sees."""

    title = "LLM error"

    def __init__(self, message: str, kind: str, *, retry_after: float | None = None,
                 status: int | None = None) -> None:
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown LlmError kind {kind!r}")
        super().__init__(message, _TITLES[kind])
        self.kind = kind
        self.retry_after = retry_after
        self.status = status

    @property
    def retryable(self) -> bool:
        """Whether trying the same turn again later may succeed."""
        return self.kind in RETRYABLE_KINDS


@dataclass(frozen=True, slots=True)
class LlmSettings:
    """How to reach the model. ``api_key`` never appears in repr or error messages."""

    model: str
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    max_retries: int = 2
    retry_backoff_s: float = 0.5  # first backoff for 5xx / connection errors; doubles each retry
    max_retry_wait_s: float = 30.0  # a Retry-After longer than this is not waited for
    max_tokens: int | None = None  # sent to the provider when set ([llm] max_tokens; 0 in config = not sent)
    limits: TurnLimits = field(default_factory=TurnLimits)  # what one turn may cost (agent.limits)

    @property
    def configured(self) -> bool:
        return bool(self.model.strip())

    @classmethod
    def from_config(cls, llm: Any, env: Mapping[str, str] | None = None) -> LlmSettings:
        """Build from ``config.LlmConfig``; the key is read from the variable named by ``api_key_env``."""
        env = os.environ if env is None else env
        key_var = (getattr(llm, "api_key_env", "") or "").strip()
        api_key = env.get(key_var) if key_var else None
        return cls(
            model=(llm.model or "").strip(),
            api_base=(llm.api_base or "").strip() or None,
            api_key=api_key or None,
            timeout_s=float(llm.timeout_s),
            max_retries=int(getattr(llm, "max_retries", 2)),
            max_tokens=int(getattr(llm, "max_tokens", 0) or 0) or None,
            limits=TurnLimits.from_config(llm),
        )


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of one tool call; fragments with the same ``index`` concatenate."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class LlmChunk:
    text: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    finish_reason: str | None = None
    usage: Usage | None = None


# --- the lazy import --------------------------------------------------------------------------

_import_lock = threading.Lock()
_litellm: Any = None


def preload() -> None:
    """Import and configure litellm (slow: call it from a background thread, e.g. ``asyncio.to_thread``)."""
    _load()


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
            tokens.use_litellm_counter(litellm.token_counter)
            log.info("litellm %s imported in %.1f s", getattr(litellm, "version", "?"), time.perf_counter() - t0)
    return _litellm


async def _load_async() -> Any:
    if _litellm is not None:
        return _litellm
    return await asyncio.to_thread(_load)


def count_tokens(model: str, text_or_messages: str | Iterable[Mapping[str, Any]]) -> int:
    """Token count with litellm's counter once loaded, else the fast offline fallback (``agent.tokens``)."""
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
    """How many prompt tokens ``model`` takes, by litellm's model table; None when unknown (or not loaded)."""
    if _litellm is None or not model:
        return None
    try:
        info = _litellm.get_model_info(model)
    except Exception:  # unknown model: no window, not an error
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if isinstance(window, int | float) and window > 0 else None


# --- errors -------------------------------------------------------------------------------------

_PREFIX = re.compile(r"^\s*(?:litellm\.)?[A-Za-z]*(?:Error|Exception|Timeout)\s*(?::|-)\s*")


def _detail(exc: BaseException, secret: str | None) -> str:
    """The provider's own words, without litellm's class-name prefixes, on one line."""
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = str(text)
    for _ in range(6):
        stripped = _PREFIX.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    text = re.sub(r"\b\w+Exception - ", "", text)
    text = text.split("\n", 1)[0]
    text = re.sub(r"\s*(Received Model Group|Available Model Group Fallbacks|LiteLLM Retried).*$", "", text)
    text = " ".join(text.split())
    if secret:
        text = text.replace(secret, "***")
    # Keys of well-known shapes are masked even when they are not ours (a provider may echo one back).
    text = re.sub(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{6,}", r"\1-***", text)
    if len(text) > 300:
        text = text[:297] + "..."
    return text.rstrip(" .")


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a Retry-After (or retry-after-ms) header on the error's response, if any."""
    candidates = [getattr(exc, "litellm_response_headers", None), getattr(exc, "headers", None)]
    response = getattr(exc, "response", None)
    if response is not None:
        candidates.append(getattr(response, "headers", None))
    for headers in candidates:
        if not headers:
            continue
        try:
            ms = headers.get("retry-after-ms")
            if ms is not None:
                return max(0.0, float(ms) / 1000)
            value = headers.get("retry-after")
        except Exception:
            continue
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        return max(0.0, when.timestamp() - time.time())
    return None


def _where(settings: LlmSettings) -> str:
    if settings.api_base:
        return settings.api_base
    provider = settings.model.split("/", 1)[0] if "/" in settings.model else "the provider"
    return provider


def map_error(exc: BaseException, settings: LlmSettings) -> LlmError:
    """Turn anything a model call raised into an :class:`LlmError` with one readable line."""
    if isinstance(exc, LlmError):
        return exc
    lit = _litellm
    detail = _detail(exc, settings.api_key)
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None

    def is_(name: str) -> bool:
        cls = getattr(lit, name, None) if lit is not None else None
        return isinstance(cls, type) and isinstance(exc, cls)

    text = detail.lower()
    if is_("ContextWindowExceededError") or "context_length_exceeded" in text or "maximum context length" in text:
        return LlmError(
            f"The conversation is too long for {settings.model}'s context window ({detail}). "
            "Start a new chat or lower [llm] history_tokens.", "context_length", status=status)
    if is_("AuthenticationError") or is_("PermissionDeniedError") or status in (401, 403):
        return LlmError(
            f"{_where(settings)} rejected the API key ({detail}). Check the variable named by [llm] api_key_env.",
            "auth", status=status)
    if is_("RateLimitError") or status == 429:
        after = _retry_after(exc)
        wait = f" Retry after {after:.0f} s." if after is not None else ""
        return LlmError(f"Rate limited by {_where(settings)} ({detail}).{wait}", "rate_limit",
                        retry_after=after, status=status)
    chain = _cause_chain(exc)
    if is_("Timeout") or any(_is_timeout(e) for e in chain):
        return LlmError(f"{settings.model} did not answer within {settings.timeout_s:g} s.", "timeout", status=status)
    # litellm reports a refused connection as a 500 "Connection error.": the cause chain tells the truth.
    if is_("APIConnectionError") or any(_is_connection_error(e) for e in chain):
        return LlmError(f"Cannot reach {_where(settings)} ({detail}).", "connection", status=status)
    if "llm provider not provided" in text:
        return LlmError(
            f"litellm does not know which provider serves {settings.model!r}: add a provider prefix, e.g. "
            f"\"openai/{settings.model}\" (with [llm] api_base for an OpenAI-compatible server).", "bad_request",
            status=status)
    if is_("NotFoundError") or status == 404:
        return LlmError(f"{_where(settings)} does not know the model {settings.model!r} ({detail}).", "bad_request",
                        status=status)
    if is_("BadRequestError") or (status is not None and 400 <= status < 500):
        return LlmError(f"{_where(settings)} refused the request ({detail}).", "bad_request", status=status)
    if (status is not None and status >= 500) or is_("APIError"):
        code = f" {status}" if status else ""
        return LlmError(f"{_where(settings)} had a server error{code} ({detail}).", "server", status=status)
    # Anything else (a malformed stream, a provider quirk): still one line, treated like a server fault.
    return LlmError(f"The model call failed: {type(exc).__name__}: {detail}.", "server", status=status)


def _cause_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 12:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or bool(
        _class_names(exc) & {"APITimeoutError", "TimeoutException", "ReadTimeout", "ServerTimeoutError"})


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionError):
        return True
    return bool(_class_names(exc) & {"APIConnectionError", "ConnectError", "ClientConnectorError",
                                     "RemoteProtocolError", "ServerDisconnectedError", "ClientConnectionError"})


def _retry_delay(err: LlmError, attempt: int, settings: LlmSettings) -> float | None:
    """Seconds to wait before retry number ``attempt + 1``, or None to give up now."""
    if err.kind not in _AUTO_RETRY_KINDS or attempt >= settings.max_retries:
        return None
    if err.kind == "rate_limit" and err.retry_after is not None:
        return err.retry_after if err.retry_after <= settings.max_retry_wait_s else None
    backoff = settings.retry_backoff_s * (2 ** attempt)
    return min(settings.max_retry_wait_s, backoff * (1 + random.random() * 0.1))


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
) -> AsyncIterator[LlmChunk]:
    """Stream one completion. Raises :class:`LlmError`; cancellation propagates as CancelledError."""
    if not settings.configured:
        raise LlmError("No model is configured: set [llm] model in config.toml or $DIDACTYL_MODEL.",
                       "not_configured")
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
            why = (f"the connection to {_where(settings)} dropped." if err.kind == "connection" else err.message)
            raise LlmError(f"The reply was cut off: {why}", err.kind, retry_after=err.retry_after, status=err.status)
        delay = _retry_delay(err, attempt, settings)
        if delay is None:
            raise err
        attempt += 1
        log.info("model call failed (%s); retry %d of %d in %.2f s", err.kind, attempt, settings.max_retries, delay)
        await asyncio.sleep(delay)
