"""Which model is in use, where it came from, and a bounded connection test.

Sources, strongest first: ``$DIDACTYL_MODEL`` (this shell) > the model chosen in the app (``state.toml``) >
``[llm] model`` in config.toml. The chosen model carries its own api_base and key variable; a model from the
environment or the config file takes them from the config (``$DIDACTYL_API_BASE`` applied). A model chosen in
the app while ``$DIDACTYL_MODEL`` is set is used for this run only in effect: the variable wins again at the
next start, and :meth:`ModelService.shadowed` says so.

A key typed in the dialog is kept in the API key file (service/api_keys.py) under the key variable's name and
put in the environment the model call reads at once; "none" marks a server that needs no key.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import AgentError, ConfigError
from . import state
from .api_keys import is_variable_name, keep_api_key

ENV_MODEL = "DIDACTYL_MODEL"
STATE_MODEL, STATE_API_BASE, STATE_KEY_ENV = "model", "model_api_base", "model_api_key_env"
STATE_NO_KEY = "model_no_key"
CHECK_TIMEOUT_S = 20.0  # the longest a connection test may take, whatever [llm] timeout_s says
# The longest a test waits first for the model helper to start and import litellm (~8 s here, 30 s under load):
# that time is not the server's, and on a first run it came out of the 20 s above.
HELPER_READY_S = 120.0
NO_KEY = "none"  # typed as the key: the server needs none
# What is sent instead to a server that needs no key: OpenAI's client refuses to send a request without one.
NO_KEY_PLACEHOLDER = "no-key"


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """What the model dialog edits: the litellm model name, the server, the name of the key's variable, and
    whether the server needs no key. ``api_key``: a key just typed, on its way to the key file (never shown,
    never in state.toml)."""

    model: str
    api_base: str = ""
    api_key_env: str = ""
    no_key: bool = False
    api_key: str = field(default="", repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ModelCheck:
    """A connection test's outcome: one line for the user, and the server's model list when it has one.
    ``needs_key``: the server asked for a key and none was given."""

    ok: bool
    line: str
    models: tuple[str, ...] = field(default=())
    needs_key: bool = False


SOURCE_WORDS = {
    "env": f"${ENV_MODEL} (this shell) wins over the model chosen in the app and config.toml",
    "state": "chosen in the app (remembered in state.toml); it wins over config.toml",
    "config": "[llm] model in config.toml (nothing chosen in the app, no $" + ENV_MODEL + ")",
    "none": f"no model: choose one here, or set [llm] model in config.toml or ${ENV_MODEL}",
}


class ModelService:
    """The model in use and why (see the module docstring for the order), switching it, testing a connection, and
    counting tokens for it. Exists before the service starts: the model dialog works without a relay.

    ``env``: the environment the model call reads (a key typed in the dialog goes there); ``own_env``: the shell's
    own, which wins over the API key file; ``key_file``: where typed keys are kept."""

    def __init__(self, config: Config, env: dict[str, str], data_dir: Any, *, own_env: Mapping[str, str] | None = None,
                 key_file: Path | None = None) -> None:
        self._config, self._data_dir = config, data_dir
        self._env, self._own_env = env, dict(env if own_env is None else own_env)
        self.api_key_file = key_file
        self.env_model = env.get(ENV_MODEL, "").strip()
        remembered = state.read_state(data_dir)
        chosen = remembered.get(STATE_MODEL)
        self.remembered = chosen.strip() if isinstance(chosen, str) else ""
        self._chosen: ModelSettings | None = None  # set when the state's (or this run's) choice is in use
        self.source = "env" if self.env_model else "config" if config.llm.model.strip() else "none"
        if not self.env_model and self.remembered:
            llm = config.llm
            self._chosen = ModelSettings(self.remembered, _text(remembered.get(STATE_API_BASE), llm.api_base),
                                         _text(remembered.get(STATE_KEY_ENV), llm.api_key_env),
                                         remembered.get(STATE_NO_KEY) is True)
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

    @property
    def configured(self) -> bool:
        return bool(self.name.strip())

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
        """Use ``chosen`` now and remember it in state.toml; a key typed with it goes to the API key file and into
        the environment the model call reads, refused when the shell sets that variable: it would win. File
        writes: call it from a thread in a UI."""
        key_file, env, own_env = self.api_key_file, self._env, self._own_env
        # A bare name changes the model only: the server and key variable in use stay.
        settings = replace(self.settings, model=chosen) if isinstance(chosen, str) else chosen
        key = "" if settings.no_key else settings.api_key.strip()
        settings = ModelSettings(settings.model.strip(), settings.api_base.strip(), settings.api_key_env.strip(),
                                 settings.no_key)
        if not settings.model:
            raise ConfigError("a model name cannot be empty", "Model")
        problem = key_env_problem(settings.api_key_env)
        if problem:
            raise ConfigError(problem, "Model")
        if key:
            name = settings.api_key_env
            if not name:  # the provider's usual variable, unless the shell sets it to another key
                name = usual_key_variable(settings.model)
                name = name if key_shadowed(name, own_env, key) is None else f"DIDACTYL_{name}"
            problem = key_shadowed(name, own_env, key)
            if problem:
                raise ConfigError(problem, "Model")
            settings = replace(settings, api_key_env=name)
            if key_file is None or env is None:
                raise ConfigError("no key file to keep the key in", "Model")
            keep_api_key(key_file, settings.api_key_env, key)
            env[settings.api_key_env] = key
        state.remember_many(self._data_dir, {STATE_MODEL: settings.model, STATE_API_BASE: settings.api_base,
                                             STATE_KEY_ENV: settings.api_key_env, STATE_NO_KEY: settings.no_key})
        self._chosen, self.remembered, self.source = settings, settings.model, "state"

    def key_problem(self, chosen: ModelSettings) -> str | None:
        """Why the key typed with ``chosen`` could not be used (the shell sets its variable to another), or None."""
        if chosen.no_key or not chosen.api_key.strip() or not chosen.api_key_env.strip():
            return None  # no key, or its variable is picked when it is kept (one the shell leaves free)
        return key_shadowed(chosen.api_key_env.strip(), self._own_env, chosen.api_key)

    def llm_settings(self) -> Any:
        """How to reach the model in use: every [llm] setting, with the model, server and key of the choice."""
        from ..agent.llm.types import LlmSettings

        return llm_settings_for(LlmSettings.from_config(self._config.llm, self._env), self.settings, self._env)

    async def complete(self, messages: list[dict[str, Any]], *, max_chars: int, timeout_s: float) -> str:
        """One completion with the model in use and no tools, outside any chat (the merge view's model draft):
        through the agent's one door to the model, bounded in size (``max_chars`` of reply) and time. AgentError
        says why there is no answer (no model configured, the model failed, too long, too slow)."""
        from ..actions import no_model_line
        from ..agent.llm import client as llm
        from ..agent.llm.errors import LlmError

        if not self.name.strip():
            raise AgentError(no_model_line(self._config.keys), "No model configured")
        parts: list[str] = []
        size = 0
        try:
            async with asyncio.timeout(timeout_s), contextlib.aclosing(
                    llm.stream_chat(self.llm_settings(), messages)) as stream:
                async for chunk in stream:
                    parts.append(chunk.text)
                    size += len(chunk.text)
                    if size > max_chars:
                        raise AgentError(f"the model's answer passed {max_chars:,} characters: stopped", "Model")
        except LlmError as exc:
            raise AgentError(exc.message, "Model") from None
        except TimeoutError:
            raise AgentError(f"the model did not answer within {timeout_s:g} s", "Model") from None
        return "".join(parts)

    async def check(self, chosen: ModelSettings) -> ModelCheck:
        """A bounded connection test (a one-token completion; the server's /models list when it has an api_base).
        Works before the service has started (no relay needed)."""
        from ..agent.llm.types import LlmSettings

        return await check_model(LlmSettings.from_config(self._config.llm, self._env), chosen, self._env)

    def warm_client(self) -> None:
        """Start the model helper now unless it runs (a model is about to be needed: the first key typed, the model
        dialog open); it stops again after ``[llm] helper_idle_exit_s`` unused. Blocking (it starts a process): call
        it from a thread. Nothing without the helper ([llm] worker_process = false)."""
        if self._config.llm.worker_process:
            from ..agent.llm.client import start_worker

            start_worker(self._config.llm.helper_idle_exit_s)

    def client_warm(self) -> bool:
        """Whether the model client is there (the helper runs, or litellm is loaded here): cheap, for a UI."""
        from ..agent.llm.client import is_loaded
        from ..agent.llm.worker_client import worker

        return worker().running if self._config.llm.worker_process else is_loaded()

    def wait_client(self, timeout: float) -> bool:
        """Wait (blocking: from a thread) until the helper has loaded litellm, failed to, or stopped; at most
        ``timeout``. Whether it is ready."""
        from ..agent.llm.worker_client import worker

        helper = worker()
        if helper.running:
            helper.settled.wait(timeout)
        return helper.ready.is_set()

    def count_tokens(self, text: str) -> tuple[int, bool]:
        """Tokens in ``text`` for the model in use, counted as prompt assembly counts them (CPU work for a long
        text: call it from a thread in a UI), and whether the count is an estimate (no helper runs to count it)."""
        from ..agent.llm.tokens import count_tokens, counts_estimated

        estimated = counts_estimated()
        return count_tokens(self.name, text), estimated

    def context_window(self) -> int | None:
        """Prompt tokens the model accepts: ``[llm] context_window``, else litellm's table as :meth:`ask_context_window`
        last learned it (None: unknown, or not asked yet). Never waits: what a view reads on the UI loop."""
        from ..agent.llm.client import known_context_window

        return self._config.llm.context_window or known_context_window(self.name)

    def ask_context_window(self) -> int | None:
        """:meth:`context_window`, asking litellm's table when it is not known yet (a round trip to the model helper
        when it runs there: call it from a thread, as a prompt's assembly and the memory editor do)."""
        from ..agent.llm.client import context_window  # litellm itself only when loaded already

        return self._config.llm.context_window or context_window(self.name)

    def should_preload(self) -> bool:
        """Import litellm ahead of the first turn only when a model is configured (#13: ~200 MiB of RSS)."""
        from ..agent.llm.client import should_preload

        return should_preload(self.llm_settings())


def key_env_problem(name: str) -> str | None:
    """Why ``name`` cannot be the key's variable name, or None. Never echoes it: it may be the key itself."""
    name = name.strip()
    if not name or is_variable_name(name):
        return None
    return ("the key variable must be an environment variable's name (letters, digits, _), e.g. OPENAI_API_KEY: "
            "never the key itself")


def usual_key_variable(model: str) -> str:
    """The provider's usual key variable for a litellm model name (OPENAI_API_KEY for openai/...)."""
    from ..agent.llm.errors import key_variable
    from ..agent.llm.types import LlmSettings

    return key_variable(LlmSettings(model=model))


def key_shadowed(name: str, own_env: Mapping[str, str], key: str) -> str | None:
    """Why ``key`` typed for ``name`` would not be used: the shell's environment sets another (and wins)."""
    if own_env.get(name, "").strip() in ("", key.strip()):
        return None
    return (f"${name} is set in this shell and wins over a key typed here: name another key variable for it "
            f"(e.g. DIDACTYL_{name}), or unset ${name}")


def _text(value: Any, default: str) -> str:
    return value.strip() if isinstance(value, str) else default


def llm_settings_for(base: Any, chosen: ModelSettings, env: Mapping[str, str]) -> Any:
    """``base`` (agent.llm.LlmSettings from [llm]) with the chosen model, server and key (one just typed, else
    the key variable's)."""
    if chosen.no_key:
        key = NO_KEY_PLACEHOLDER
    else:
        key = chosen.api_key.strip() or (env.get(chosen.api_key_env, "").strip() if chosen.api_key_env else "")
    # No variable named: litellm reads the provider's usual one (OPENAI_API_KEY, ...) itself.
    return replace(base, model=chosen.model, api_base=chosen.api_base or None, api_key=key or None,
                   api_key_env=chosen.api_key_env or None)


async def check_model(base: Any, chosen: ModelSettings, env: Mapping[str, str]) -> ModelCheck:
    """A tiny completion (one token) and, with an api_base, the server's /models list; bounded in time."""
    from ..agent.llm import client as llm
    from ..agent.llm.errors import LlmError
    from ..agent.llm.model_probe import list_models

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
    if settings.worker_process:
        await asyncio.to_thread(warm_model_client, HELPER_READY_S, settings.helper_idle_exit_s)
    started = time.monotonic()
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S + 1.0):
            async for _ in llm.stream_chat(settings, [{"role": "user", "content": "Say OK."}]):
                pass
    except LlmError as exc:
        return ModelCheck(False, exc.message, models, needs_key=exc.kind == "auth" and not settings.api_key)
    except TimeoutError:
        return ModelCheck(False, f"{chosen.model} did not answer within {CHECK_TIMEOUT_S:g} s", models)
    return ModelCheck(True, f"{chosen.model} answered in {time.monotonic() - started:.1f} s", models)


def warm_model_client(wait_s: float = 0.0, idle_exit_s: float | None = None) -> None:
    """Start the model helper process unless it runs (it imports litellm as it starts); wait up to ``wait_s`` for it
    to be ready. Blocking: call it from a thread."""
    from ..agent.llm.client import start_worker
    from ..agent.llm.worker_client import worker

    start_worker(idle_exit_s)
    if wait_s > 0:
        worker().ready.wait(wait_s)
