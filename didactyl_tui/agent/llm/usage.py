"""What the model reported a turn cost: tokens and money (the server's counts, when it sends them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int | None = None  # every request of the turn together (what was billed)
    completion_tokens: int | None = None
    cost_usd: float | None = None
    last_prompt_tokens: int | None = None  # the turn's last request alone: what it took of the context window
