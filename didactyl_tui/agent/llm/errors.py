"""How a failed model call reads: :class:`LlmError` (a kind and one line, never the key), the mapping from
whatever litellm or the provider raised, and our retry policy's delays. No litellm import here: its exception
classes arrive as an argument (``classify``), so this module stays light and testable without it.
"""

from __future__ import annotations

import email.utils
import random
import re
import time
from typing import Any

from ...errors import AgentError
from .types import LlmSettings

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


# --- errors -------------------------------------------------------------------------------------

_PREFIX = re.compile(r"^\s*(?:litellm\.)?[A-Za-z]*(?:Error|Exception|Timeout)\s*(?::|-)\s*")


def safe_detail(exc: BaseException, secret: str | None) -> str:
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


def retry_after(exc: BaseException) -> float | None:
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


def where(settings: LlmSettings) -> str:
    if settings.api_base:
        return settings.api_base
    provider = settings.model.split("/", 1)[0] if "/" in settings.model else "the provider"
    return provider


# litellm's and the providers' words for "no key was given at all" (not "the key was wrong").
_MISSING_KEY = re.compile(r"missing credentials|missing \w+ api key|no (?:api )?key is set|api_key client option "
                          r"must be set", re.IGNORECASE)
_KEY_VAR = re.compile(r"\b([A-Z][A-Z0-9_]*_API_KEY)\b")


def key_variable(settings: LlmSettings, detail: str = "") -> str:
    """The environment variable that should hold the key: [llm] api_key_env, else the one the provider's
    error names, else <PROVIDER>_API_KEY."""
    if settings.api_key_env:
        return settings.api_key_env
    named = _KEY_VAR.search(detail)
    if named:
        return named.group(1)
    provider = settings.model.split("/", 1)[0] if "/" in settings.model else "openai"
    return re.sub(r"[^A-Z0-9]", "_", provider.upper()) + "_API_KEY"


def missing_key_message(settings: LlmSettings, detail: str = "") -> str:
    """The one-line fix for a call made without any key."""
    var = key_variable(settings, detail)
    # The app's model dialog takes the key (or "none") and uses it at once; the CLI reads what it kept.
    dialog = "type the key in the app's model dialog (Switch model" + ("; none: the server needs no key)"
                                                                       if settings.api_base else ")")
    if settings.api_key_env:
        return (f"No API key for {where(settings)}: ${var} (named by [llm] api_key_env) is empty. "
                f"Fix: {dialog}, or export {var}=<your key> and restart.")
    return (f"No API key for {where(settings)}. Fix: {dialog}, or export {var}=<your key> and restart, or name "
            "another variable in [llm] api_key_env.")


def classify(exc: BaseException, settings: LlmSettings, lit: Any) -> LlmError:
    """Turn anything a model call raised into an :class:`LlmError` with one readable line (``lit``: the
    litellm module once imported, for its exception classes; None before)."""
    if isinstance(exc, LlmError):
        return exc
    detail = safe_detail(exc, settings.api_key)
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None

    def is_(name: str) -> bool:
        cls = getattr(lit, name, None) if lit is not None else None
        return isinstance(cls, type) and isinstance(exc, cls)

    text = detail.lower()
    if _MISSING_KEY.search(detail):
        return LlmError(missing_key_message(settings, detail), "auth", status=status)
    if is_("ContextWindowExceededError") or "context_length_exceeded" in text or "maximum context length" in text:
        return LlmError(
            f"The conversation is too long for {settings.model}'s context window ({detail}). "
            "Start a new chat or lower [llm] history_tokens.", "context_length", status=status)
    if is_("AuthenticationError") or is_("PermissionDeniedError") or status in (401, 403):
        return LlmError(
            f"{where(settings)} rejected the API key ({detail}). Check the variable named by [llm] api_key_env.",
            "auth", status=status)
    if is_("RateLimitError") or status == 429:
        after = retry_after(exc)
        wait = f" Retry after {after:.0f} s." if after is not None else ""
        return LlmError(f"Rate limited by {where(settings)} ({detail}).{wait}", "rate_limit",
                        retry_after=after, status=status)
    chain = _cause_chain(exc)
    if is_("Timeout") or any(_is_timeout(e) for e in chain):
        return LlmError(f"{settings.model} did not answer within {settings.timeout_s:g} s.", "timeout", status=status)
    # litellm reports a refused connection as a 500 "Connection error.": the cause chain tells the truth.
    if is_("APIConnectionError") or any(_is_connection_error(e) for e in chain):
        return LlmError(f"Cannot reach {where(settings)} ({detail}).", "connection", status=status)
    if "llm provider not provided" in text:
        return LlmError(
            f"litellm does not know which provider serves {settings.model!r}: add a provider prefix, e.g. "
            f"\"openai/{settings.model}\" (with [llm] api_base for an OpenAI-compatible server).", "bad_request",
            status=status)
    if is_("NotFoundError") or status == 404:
        return LlmError(f"{where(settings)} does not know the model {settings.model!r} ({detail}).", "bad_request",
                        status=status)
    if is_("BadRequestError") or (status is not None and 400 <= status < 500):
        return LlmError(f"{where(settings)} refused the request ({detail}).", "bad_request", status=status)
    if (status is not None and status >= 500) or is_("APIError"):
        code = f" {status}" if status else ""
        return LlmError(f"{where(settings)} had a server error{code} ({detail}).", "server", status=status)
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


def retry_delay(err: LlmError, attempt: int, settings: LlmSettings) -> float | None:
    """Seconds to wait before retry number ``attempt + 1``, or None to give up now."""
    if err.kind not in _AUTO_RETRY_KINDS or attempt >= settings.max_retries:
        return None
    if err.kind == "rate_limit" and err.retry_after is not None:
        return err.retry_after if err.retry_after <= settings.max_retry_wait_s else None
    backoff = settings.retry_backoff_s * (2 ** attempt)
    return min(settings.max_retry_wait_s, backoff * (1 + random.random() * 0.1))
