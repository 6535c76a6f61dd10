"""Pilot: the model dialog sets model, server and key variable together, tests the connection, offers the
server's model list, and says when $DIDACTYL_MODEL hides the model chosen in the app."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply
from tui_support import SIZE, click, make_app, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.service.state import write_state
from didactyl_tui.tui.screens.first_run import FirstRunScreen
from didactyl_tui.tui.screens.main import MainScreen
from didactyl_tui.tui.screens.model_switch import ModelSwitchScreen

# This process's model helper is warm before any test's deadline (conftest's warm_litellm).
pytestmark = pytest.mark.usefixtures("warm_litellm")


async def press_button(pilot, dialog, selector: str) -> None:
    """Focus and Enter, as a keyboard user does (a click could land where the growing dialog was a frame ago)."""
    button = dialog.query_one(selector)
    button.focus()
    # focus() lands on a later message: under load an Enter pressed at once could still go to the field before.
    await wait_for(pilot, lambda: pilot.app.focused is button and not button.disabled, 10, f"{selector} focused")
    await pilot.press("enter")


async def test_first_run_dialog_sets_server_key_variable_and_picks_from_the_model_list(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(model=""), env=make_env(LOCAL_KEY="sk-local"))
    async with LlmStub() as stub, app.run_test(size=SIZE) as pilot:
        stub.script(Reply.text_reply("OK"))
        await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen), 10, "the first-run help")
        await started(pilot)
        await click(pilot, "#set-model")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen) and app.screen)
        assert "no model" in screen_text(app)  # which source decides, even when there is none
        dialog.query_one("#model-api-base").value = stub.base_url
        dialog.query_one("#model-key-env").value = "LOCAL_KEY"
        await press_button(pilot, dialog, "#test")  # no model typed: the server's list is offered
        listing = dialog.query_one("#model-list")
        await wait_for(pilot, lambda: listing.display and listing.option_count == 2, 20, "the model list")
        listing.focus()
        listing.highlighted = 1  # "stub-model" (sorted after "stub-large")
        await pilot.press("enter")
        assert dialog.query_one("#model-name").value == "openai/stub-model"
        await press_button(pilot, dialog, "#test")
        result = dialog.query_one("#model-check-result")
        await wait_for(pilot, lambda: "answered" in str(result.render()), 60,
                       lambda: f"the connection test: {result.render()!s}")
        assert stub.requests[-1].headers["Authorization"] == "Bearer sk-local"
        await press_button(pilot, dialog, "#use")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        await wait_for(pilot, lambda: app.service.model.name == "openai/stub-model", 10, "the model to switch")
        assert app.service.model.settings.api_base == stub.base_url
    state = tomllib.loads((tmp_path / "state.toml").read_text())
    assert {k: v for k, v in state.items() if k.startswith("model")} == {
        "model": "openai/stub-model", "model_api_base": stub.base_url, "model_api_key_env": "LOCAL_KEY",
        "model_no_key": False}


async def test_a_key_pasted_as_the_variable_name_is_refused_and_not_saved(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("ctrl+l")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen) and app.screen)
        dialog.query_one("#model-key-env").value = "sk-proj-abc123"
        await pilot.press("ctrl+s")  # use this model (the button may be below the fold: the dialog opens at its top)
        await wait_for(pilot, lambda: "never the key itself" in screen_text(app), 10,
                       lambda: f"the refusal; shown: {screen_text(app)!r}")
        assert app.screen is dialog
    state = tomllib.loads((tmp_path / "state.toml").read_text()) if (tmp_path / "state.toml").exists() else {}
    assert not [k for k in state if k.startswith("model")]  # nothing of the refused choice was kept


async def test_didactyl_model_hiding_the_chosen_model_is_said_in_status_and_dialog(tmp_path: Path) -> None:
    write_state(tmp_path, {"model": "openai/chosen-in-app"})
    config = make_config(model="openai/from-env")  # what load_config does with $DIDACTYL_MODEL
    app = make_app(tmp_path, config, env=make_env(DIDACTYL_MODEL="openai/from-env"))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        assert main.status.model == "openai/from-env" and main.status.model_warning
        text = screen_text(app)
        assert "openai/from-env ($DIDACTYL_MODEL)" in text
        # A notification says what hides the chosen model and how to get it back.
        [note] = [n.message for n in app._notifications if "unset $DIDACTYL_MODEL" in n.message]
        assert "openai/chosen-in-app" in note
        await pilot.press("ctrl+l")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen) and app.screen)
        await pilot.pause()
        assert "wins over the model chosen in the app" in str(dialog.query_one("#model-source").render())
        assert "openai/chosen-in-app" in str(dialog.query_one("#model-shadowed").render())
