"""A first run that finishes in the app: the model dialog takes an API key (or "none" for a local
OpenAI-compatible server that needs no key), tests it, keeps it 0600 in the API key file, and the next message
uses it with no restart. The key is never on screen, in state.toml or in the config. The LLM stub server is the
local server."""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply
from tui_support import SIZE, make_app, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.service.app import AppService
from didactyl_tui.service.model import ModelSettings
from didactyl_tui.tui.screens.first_run import FirstRunScreen
from didactyl_tui.tui.screens.main import MainScreen
from didactyl_tui.tui.screens.model_switch import ModelSwitchScreen

TYPED_KEY = "sk-typed-in-the-dialog-0123456789"


# This process's model helper is warm before any test's deadline (conftest's warm_litellm).
pytestmark = pytest.mark.usefixtures("warm_litellm")


def first_run_app(tmp_path: Path):
    """No model, no key variable set: what a new user with a local server has."""
    config = make_config(model="")
    config.llm.api_key_env = ""
    env = make_env()
    env.pop("DIDACTYL_TEST_LLM_KEY")
    return make_app(tmp_path, config, env=env), config, env


async def fill(pilot, dialog, **values: str) -> None:
    for name, value in values.items():
        dialog.query_one(f"#model-{name}").value = value
    await pilot.pause()


async def connection_test(pilot, dialog) -> str:
    result = dialog.query_one("#model-check-result")
    result.update("")  # the line of an earlier test is not this one's
    dialog.run_check()
    await wait_for(pilot, lambda: str(result.render())[:1] in "✓✗" and str(result.render()), 90,
                   lambda: f"the connection test: {result.render()!s}")
    return str(result.render())


async def send_and_wait(pilot, text: str) -> str:
    main = pilot.app.main_screen
    main.chat_input.focus()
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: main.conversation.last_reply() and not main.streaming, 60, "the reply")
    return main.conversation.last_reply()


async def test_a_local_server_that_needs_no_key_finishes_the_first_run_in_the_app(tmp_path: Path) -> None:
    app, _, _ = first_run_app(tmp_path)
    async with LlmStub() as stub, app.run_test(size=SIZE) as pilot:
        stub.script(Reply.text_reply("OK"), Reply.text_reply("Hello from the local server"))
        await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen), 10, "the first-run help")
        await started(pilot)
        await pilot.press("ctrl+s")  # "Set model now", the confirm key
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen) and app.screen, 10)
        await fill(pilot, dialog, name="openai/stub-model", **{"api-base": stub.base_url})
        # No key: the dialog says where the fix is, here (not "export ... and restart").
        line = await connection_test(pilot, dialog)
        assert line.startswith("✗") and "type it under API key" in line and "restart" not in line, line
        await fill(pilot, dialog, **{"api-key": "none"})
        assert "none" in screen_text(app)  # "none" is no secret: shown as typed
        line = await connection_test(pilot, dialog)
        assert line.startswith("✓") and "answered" in line, line
        await pilot.press("ctrl+s")  # "Use this model"
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), 10)
        await wait_for(pilot, lambda: app.service.model.name == "openai/stub-model", 10, "the model to switch")
        assert await send_and_wait(pilot, "hello") == "Hello from the local server"  # no restart
        assert stub.requests[-1].headers["Authorization"] == "Bearer no-key"
    state = tomllib.loads((tmp_path / "state.toml").read_text())
    assert state["model_no_key"] is True and state["model_api_base"] == stub.base_url
    assert not (tmp_path / "api_keys.toml").exists()  # no key: nothing kept


async def test_a_typed_key_is_kept_0600_used_at_once_and_never_shown(tmp_path: Path) -> None:
    app, config, env = first_run_app(tmp_path)
    screens: list[str] = []
    async with LlmStub() as stub, app.run_test(size=SIZE) as pilot:
        stub.script(Reply.text_reply("OK"), Reply.text_reply("Hello with a key"))
        await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen), 10, "the first-run help")
        await started(pilot)
        await pilot.press("ctrl+s")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen) and app.screen, 10)
        await fill(pilot, dialog, name="openai/stub-model", **{"api-base": stub.base_url, "api-key": TYPED_KEY})
        screens.append(app.export_screenshot())
        line = await connection_test(pilot, dialog)
        assert line.startswith("✓"), line
        assert stub.requests[-1].headers["Authorization"] == f"Bearer {TYPED_KEY}"  # tested before it is kept
        screens.append(app.export_screenshot())
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), 10)
        await wait_for(pilot, lambda: app.service.model.settings.api_key_env == "OPENAI_API_KEY", 10, "kept")
        assert await send_and_wait(pilot, "hello") == "Hello with a key"
        assert stub.requests[-1].headers["Authorization"] == f"Bearer {TYPED_KEY}"
        screens.append(app.export_screenshot())
        notes = " ".join(n.message for n in app._notifications)
    keys = tmp_path / "api_keys.toml"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert tomllib.loads(keys.read_text()) == {"OPENAI_API_KEY": TYPED_KEY}
    state = (tmp_path / "state.toml").read_text()
    assert TYPED_KEY not in state and 'model_api_key_env = "OPENAI_API_KEY"' in state
    assert all(TYPED_KEY not in screen for screen in screens) and TYPED_KEY not in notes
    # The next start reads it: the key is in the environment the model call uses.
    again = AppService(config, data_dir=tmp_path, env=env)
    assert again.env["OPENAI_API_KEY"] == TYPED_KEY and again.model.settings.api_key_env == "OPENAI_API_KEY"


def test_the_environment_wins_over_the_key_file_and_a_key_it_would_hide_is_refused(tmp_path: Path) -> None:
    config = make_config()
    env = make_env(OPENAI_API_KEY="sk-from-the-shell")
    service = AppService(config, data_dir=tmp_path, env=env)
    # Typed for the variable the shell sets: it would never be used, so it is refused (and nothing kept).
    chosen = ModelSettings("openai/m", "http://h/v1", "OPENAI_API_KEY", api_key="sk-typed")
    assert "is set in this shell" in (service.model.key_problem(chosen) or "")
    # With the key variable left empty, the provider's usual one is taken, or a free one when the shell sets it.
    service.model.set(ModelSettings("openai/m", "http://h/v1", "", api_key="sk-typed"))
    assert service.model.settings.api_key_env == "DIDACTYL_OPENAI_API_KEY"
    assert service.env["DIDACTYL_OPENAI_API_KEY"] == "sk-typed" and service.env["OPENAI_API_KEY"] == "sk-from-the-shell"
    (tmp_path / "api_keys.toml").write_text('OPENAI_API_KEY = "sk-from-the-file"\n')
    assert AppService(config, data_dir=tmp_path, env=env).env["OPENAI_API_KEY"] == "sk-from-the-shell"
    assert "ModelSettings" in repr(chosen) and "sk-typed" not in repr(chosen)


async def test_a_broken_key_file_is_said_in_one_line_and_nothing_else_stops(tmp_path: Path) -> None:
    keys = tmp_path / "api_keys.toml"
    keys.write_text('OPENAI_API_KEY = "sk-unterminated\n')
    keys.chmod(0o644)
    warnings: list[str] = []
    service = AppService(make_config(publish_profile=False), data_dir=tmp_path, env=make_env())
    service.add_listener(lambda event: warnings.append(getattr(event, "message", "")))
    async with service:
        assert any(str(keys) in w and "cannot read it" in w for w in warnings), warnings
    assert all("sk-unterminated" not in w for w in warnings)
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600  # made private again
