"""Which model is in use, where it came from, and a bounded connection test.

Sources, strongest first: ``$DIDACTYL_MODEL`` (this shell) > the model chosen in the app (``state.toml``) >
``[llm] model`` in config.toml. The chosen model carries its own api_base and key variable; a model from the
environment or the config file takes them from the config (``$DIDACTYL_API_BASE`` applied). A model chosen in
the app while ``$DIDACTYL_MODEL`` is set is used for this run only in effect: the variable wins again at the
next start, and :meth:`ModelChoice.shadowed` says so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import Config
from ..errors import AgentError, ConfigError
from . import state

ENV_MODEL = "DIDACTYL_MODEL"
STATE_MODEL, STATE_API_BASE, STATE_KEY_ENV = "model", "model_api_base", "model_api_key_env"
CHECK_TIMEOUT_S = 20.0  # the longest a connection test may take, whatever [llm] timeout_s says


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """What the model dialog edits: the litellm model name, the server, and the name of the key's variable."""

    model: str
    api_base: str = ""
    api_key_env: str = ""


@dataclass(frozen=True, slots=True)
class ModelCheck:
    """A connection test's outcome: one line for the user, and the server's model list when it has one."""

    ok: bool
    line: str
    models: tuple[str, ...] = field(default=())


SOURCE_WORDS = {
    "env": f"${ENV_MODEL} (this shell) wins over the model chosen in the app and config.toml",
    "state": "chosen in the app (remembered in state.toml); it wins over config.toml",
    "config": "[llm] model in config.toml (nothing chosen in the app, no $" + ENV_MODEL + ")",
    "none": f"no model: choose one here, or set [llm] model in config.toml or ${ENV_MODEL}",
}


class ModelChoice:
    """The model in use and why (see the module docstring for the order)."""

    def __init__(self, config: Config, env: Mapping[str, str], data_dir: Any) -> None:
        self._config, self._data_dir = config, data_dir
        self.env_model = env.get(ENV_MODEL, "").strip()
        remembered = state.read_state(data_dir)
        chosen = remembered.get(STATE_MODEL)
        self.remembered = chosen.strip() if isinstance(chosen, str) else ""
        self._chosen: ModelSettings | None = None  # set when the state's (or this run's) choice is in use
        self.source = "env" if self.env_model else "config" if config.llm.model.strip() else "none"
        if not self.env_model and self.remembered:
            llm = config.llm
            self._chosen = ModelSettings(self.remembered, _text(remembered.get(STATE_API_BASE), llm.api_base),
                                         _text(remembered.get(STATE_KEY_ENV), llm.api_key_env))
            self.source = "state"

    @property
    def settings(self) -> ModelSettings:
        """The model in use with its server and key variable (from the config, read live, unless chosen)."""
        if self._chosen is not None:
            return self._chosen
        llm = self._config.llm
        return ModelSettings(llm.model.strip(), llm.api_base.strip(), llm.api_key_env.strip())

    @property
    def name(self) -> str:
        return self.settings.model

    def explain(self) -> str:
        """One line: where the model in use comes from and why it wins."""
        return SOURCE_WORDS[self.source]

    def shadowed(self) -> str | None:
        """A warning when $DIDACTYL_MODEL hides (or will hide, at the next start) the model chosen in the app."""
        if not self.env_model or not self.remembered or self.remembered == self.env_model:
            return None
        if self.source == "state":  # chosen during this run: used now, overridden at the next start
            return (f"${ENV_MODEL}={self.env_model} will win over {self.remembered} at the next start: unset "
                    f"${ENV_MODEL} to keep the model chosen here")
        return (f"${ENV_MODEL}={self.env_model} overrides {self.remembered} (chosen in the app, in state.toml): "
                f"unset ${ENV_MODEL} to use it")

    def set(self, chosen: ModelSettings | str) -> None:
        """Use ``chosen`` now and remember it in state.toml (a file write: call it from a thread in a UI)."""
        # A bare name changes the model only: the server and key variable in use stay.
        settings = replace(self.settings, model=chosen) if isinstance(chosen, str) else chosen
        settings = ModelSettings(settings.model.strip(), settings.api_base.strip(), settings.api_key_env.strip())
        if not settings.model:
            raise ConfigError("a model name cannot be empty", "Model")
        problem = key_env_problem(settings.api_key_env)
        if problem:
            raise ConfigError(problem, "Model")
        state.remember_many(self._data_dir, {STATE_MODEL: settings.model, STATE_API_BASE: settings.api_base,
                                             STATE_KEY_ENV: settings.api_key_env})
        self._chosen, self.remembered, self.source = settings, settings.model, "state"


def key_env_problem(name: str) -> str | None:
    """Why ``name`` cannot be the key's variable name, or None. Never echoes it: it may be the key itself."""
    name = name.strip()
    if not name or (name.replace("_", "").isalnum() and name.isascii() and not name[0].isdigit()):
        return None
    return ("the key variable must be an environment variable's name (letters, digits, _), e.g. OPENAI_API_KEY: "
            "never the key itself")


def _text(value: Any, default: str) -> str:
    return value.strip() if isinstance(value, str) else default


def llm_settings_for(base: Any, chosen: ModelSettings, env: Mapping[str, str]) -> Any:
    """``base`` (agent.llm.LlmSettings from [llm]) with the chosen model, server and key variable."""
    key = env.get(chosen.api_key_env, "").strip() if chosen.api_key_env else ""
    # No variable named: litellm reads the provider's usual one (OPENAI_API_KEY, ...) itself.
    return replace(base, model=chosen.model, api_base=chosen.api_base or None, api_key=key or None,
                   api_key_env=chosen.api_key_env or None)


async def check_model(base: Any, chosen: ModelSettings, env: Mapping[str, str]) -> ModelCheck:
    """A tiny completion (one token) and, with an api_base, the server's /models list; bounded in time."""
    from ..agent import llm
    from ..agent.model_probe import list_models

    settings = llm_settings_for(base, chosen, env)
    settings = replace(settings, max_retries=0, max_tokens=1, timeout_s=min(settings.timeout_s, CHECK_TIMEOUT_S))
    models: tuple[str, ...] = ()
    if chosen.api_base:
        try:
            models = tuple(await list_models(chosen.api_base, settings.api_key, timeout_s=settings.timeout_s))
        except AgentError:
            models = ()  # not every server lists its models: the completion below is the real test
    if not chosen.model.strip():
        line = f"{len(models)} models offered by the server: pick one" if models else "type a model name first"
        return ModelCheck(bool(models), line, models)
    started = time.monotonic()
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S + 1.0):
            async for _ in llm.stream_chat(settings, [{"role": "user", "content": "Say OK."}]):
                pass
    except llm.LlmError as exc:
        return ModelCheck(False, exc.message, models)
    except TimeoutError:
        return ModelCheck(False, f"{chosen.model} did not answer within {CHECK_TIMEOUT_S:g} s", models)
    return ModelCheck(True, f"{chosen.model} answered in {time.monotonic() - started:.1f} s", models)
