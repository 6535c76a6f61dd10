"""The model client's value types: how to reach the model (:class:`LlmSettings`) and what a streamed reply is made
of (:class:`LlmChunk`, :class:`ToolCallDelta`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .limits import TurnLimits
from .usage import Usage


@dataclass(frozen=True, slots=True)
class LlmSettings:
    """How to reach the model. ``api_key`` never appears in repr or error messages."""

    model: str
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None  # the variable the key came from (named in a "no key" error)
    timeout_s: float = 60.0
    max_retries: int = 2
    retry_backoff_s: float = 0.5  # first backoff for 5xx / connection errors; doubles each retry
    max_retry_wait_s: float = 30.0  # a Retry-After longer than this is not waited for
    max_tokens: int | None = None  # sent to the provider when set ([llm] max_tokens; 0 in config = not sent)
    limits: TurnLimits = field(default_factory=TurnLimits)  # what one turn may cost (agent.limits)
    worker_process: bool = True  # stream through the helper process (llm.worker), not on this process's loop
    helper_idle_exit_s: float = 300.0  # the helper exits after this long unused (0: never); it starts when needed

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
            api_key_env=key_var or None,
            timeout_s=float(llm.timeout_s),
            max_retries=int(getattr(llm, "max_retries", 2)),
            max_tokens=int(getattr(llm, "max_tokens", 0) or 0) or None,
            limits=TurnLimits.from_config(llm),
            worker_process=bool(getattr(llm, "worker_process", True)),
            helper_idle_exit_s=float(getattr(llm, "helper_idle_exit_s", 300.0)),
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
