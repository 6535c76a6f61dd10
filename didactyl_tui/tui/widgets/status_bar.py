"""The status bar: model (attached: the agent), relays connected N/M (attached: those the agent reads), the last
request's prompt tokens against the model's context window (a gauge when the window is known), the session's cost so
far when known, publishes pending, and "signer away" while the agent's remote signer does not answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from ...terminal_text import one_line

GAUGE_CELLS = 10


class StatusBar(Widget):
    """One line. Attributes down: the screen sets the reactives."""

    model: reactive[str] = reactive("")
    model_note: reactive[str] = reactive("")  # where the model comes from, when that matters ($DIDACTYL_MODEL)
    model_warning: reactive[bool] = reactive(False)  # the environment hides a model chosen in the app
    model_loading: reactive[bool] = reactive(False)  # the model's helper process is starting (litellm's import)
    relays_connected: reactive[int] = reactive(0)
    relays_total: reactive[int] = reactive(0)
    prompt_tokens: reactive[int | None] = reactive(None)  # one request's, never a turn's rounds added up
    tokens_estimated: reactive[bool] = reactive(False)
    context_window: reactive[int | None] = reactive(None)
    session_cost_usd: reactive[float | None] = reactive(None)
    pending_publishes: reactive[int] = reactive(0)
    signer_away: reactive[bool] = reactive(False)  # the agent's remote signer does not answer (saves wait)
    attached_to: reactive[str] = reactive("")  # attach: the agent's npub (no model runs here)
    activity: reactive[str] = reactive("starting…")

    def render(self) -> Content:
        sep = ("  │  ", "$text-muted")
        model = one_line(self.model) or "no model set"
        parts: list[str | tuple[str, str]] = [("model ", "$text-muted"), (model, "" if self.model else "$text-warning")]
        if self.attached_to:
            parts = [("attached to ", "$text-muted"), f"{self.attached_to[:20]}…"]
        elif self.model_note:
            parts.append((f" ({self.model_note})", "$text-warning" if self.model_warning else "$text-muted"))
        if self.model_loading and not self.attached_to:
            parts.append((" loading…", "$text-accent"))
        relay_style = ("$text-success" if self.relays_total and self.relays_connected == self.relays_total
                       else "$text-warning" if self.relays_connected else "$text-error")
        label = "agent's relays " if self.attached_to else "relays "  # attached: those the agent reads, not ours
        parts += [sep, (label, "$text-muted"), (f"{self.relays_connected}/{self.relays_total}", relay_style)]
        if self.prompt_tokens is not None:
            parts += [sep, *self._prompt_parts()]
        if self.session_cost_usd is not None:
            parts += [sep, ("session cost ", "$text-muted"), f"${self.session_cost_usd:.4f}"]
        pending_style = "$text-warning" if self.pending_publishes else "$text-muted"
        parts += [sep, (f"{self.pending_publishes} publish{'es' if self.pending_publishes != 1 else ''} pending",
                        pending_style)]
        if self.signer_away:
            parts += [sep, ("signer away", "$text-error")]
        if self.activity:
            parts += [sep, (one_line(self.activity), "$text-accent")]  # may name a tool the model made up
        return Content.assemble(*parts)

    def show_relays(self, states: Mapping[str, object], watched: Sequence[str] | None = None) -> None:
        """How many of the relays (``watched`` ones only, when given: an attached window's agent's) are connected."""
        from ...service.types import ConnectionState

        urls = list(states) if watched is None else list(watched)
        self.relays_total = len(urls)
        self.relays_connected = sum(1 for url in urls if states.get(url) is ConnectionState.CONNECTED)

    def _prompt_parts(self) -> list[str | tuple[str, str]]:
        """``last prompt 1,600/128,000 tok ▰▱▱▱▱▱▱▱▱▱``; without a known window, just the tokens."""
        tokens = self.prompt_tokens or 0
        approx = "~" if self.tokens_estimated else ""
        if not self.context_window:
            return [("last prompt ", "$text-muted"), f"{approx}{tokens:,} tok"]
        share = tokens / self.context_window
        style = "$text-error" if share >= 0.95 else "$text-warning" if share >= 0.8 else "$text-success"
        filled = min(GAUGE_CELLS, max(1 if tokens else 0, round(share * GAUGE_CELLS)))
        return [("last prompt ", "$text-muted"), f"{approx}{tokens:,}/{self.context_window:,} tok ",
                ("▰" * filled, style), ("▱" * (GAUGE_CELLS - filled), "$text-muted")]
