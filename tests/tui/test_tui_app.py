"""Pilot tests of the app shell against a real AppService: first run without a model, runtime model and theme
switches remembered in state.toml, bad theme files, remapped keys, the command palette, the self pane,
export/copy, pane toggles, and no secret anywhere on screen."""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path

import pytest
from llm_stub import LlmStub, Reply
from textual.color import Color
from textual.message import Message
from textual.worker import Worker, WorkerState
from tui_support import EMBEDDED_LABEL, TEST_KEY, click, make_app, make_config, screen_text, started, wait_for

from didactyl_tui.actions import KEY_ACTIONS
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.relay import RelayClient
from didactyl_tui.tui.actions import PALETTE_ACTIONS
from didactyl_tui.tui.app import DidactylApp
from didactyl_tui.tui.commands import DidactylCommands
from didactyl_tui.tui.screens.first_run import FirstRunScreen
from didactyl_tui.tui.screens.main import MainScreen
from didactyl_tui.tui.screens.model_switch import ModelSwitchScreen
from didactyl_tui.tui.widgets.chat_input import ChatInput

SIZE = (130, 40)


# This process's model helper is warm before any test's deadline (conftest's warm_litellm).
pytestmark = pytest.mark.usefixtures("warm_litellm")


def state_of(data_dir: Path) -> dict:
    path = data_dir / "state.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


async def test_first_run_without_a_model_explains_and_everything_else_works(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(model=""))
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen) and app.screen, 10, "help")
        await started(pilot)
        text = screen_text(app)
        assert "No model configured yet" in text and "DIDACTYL_MODEL" in text
        assert "/home/user/.config/didactyl/config.toml" in text  # where the config goes, from the env given
        # Continue without a model: memory, profile and relays work.
        await click(pilot, "#continue")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        assert screen is not app.screen
        main = app.main_screen
        assert main.memory_pane("short_term").snapshot.loaded
        assert main.status.relays_connected == 1 and main.status.model == ""
        # Sending without a model is a clear inline error, and the words come back.
        main.chat_input.focus()
        await pilot.press(*"hi", "enter")
        await wait_for(pilot, lambda: main.chat_input.text == "hi", 10, "the input to come back")
        # The error entry is mounted beside the input's restore: painted a moment later on a busy machine.
        await wait_for(pilot, lambda: "No model configured" in screen_text(app), 10,
                       lambda: f"the inline error; shown: {screen_text(app)!r}")
        # It names the in-app way first (the model dialog's key), then the config.
        [error] = main.conversation.query(".error-entry")
        assert error.message.startswith("choose a model in the app with Ctrl+L, or set [llm] model in config.toml")


async def test_the_reply_view_loads_when_the_user_starts_typing_not_at_rest(tmp_path: Path) -> None:
    """An app at rest does not hold a reply's markdown machinery (#21): it is loaded on a worker thread at the
    first key typed in the message box, once, and not by the start itself."""
    seen: list[str] = []
    typed: list[Message] = []  # one message, seen again at each node it bubbles through

    def hook(message: Message) -> None:
        if isinstance(message, ChatInput.TypingStarted):
            typed.append(message)
        elif isinstance(message, Worker.StateChanged) and message.state is WorkerState.SUCCESS:
            seen.append({"service": "started", "warm-views": "warmed"}.get(message.worker.group, "other"))

    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await wait_for(pilot, lambda: "started" in seen, 60, "the start to finish")
        assert "warmed" not in seen and not typed
        app.main_screen.chat_input.focus()
        await pilot.press(*"hello")
        await wait_for(pilot, lambda: "warmed" in seen, 30, "the reply view to load")
        await pilot.press(*" again")
        await pilot.pause()
        assert len({id(m) for m in typed}) == 1 and seen.count("warmed") == 1


async def test_set_model_now_is_remembered_in_state_toml(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(model=""))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, FirstRunScreen), 10, "help")
        await started(pilot)
        await click(pilot, "#set-model")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ModelSwitchScreen) and app.screen)
        dialog.query_one("#model-name").value = ""
        await pilot.press(*"openai/gpt-4o-mini", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        # The switch is written off the UI loop once the dialog has closed (state.toml): the status bar says when.
        await wait_for(pilot, lambda: app.main_screen.status.model == "openai/gpt-4o-mini", 10, "the model switched")
        assert app.service.model.name == "openai/gpt-4o-mini" and app.service.model.configured
    assert state_of(tmp_path)["model"] == "openai/gpt-4o-mini"
    # The user's config file was never written.
    assert not (tmp_path / "config.toml").exists()


async def test_theme_switch_is_remembered_and_used_at_the_next_start(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert app.theme == "didactyl-dark"
        app.theme = "didactyl-light"
        await wait_for(pilot, lambda: state_of(tmp_path).get("theme") == "didactyl-light", 5, "state.toml")
    again = make_app(tmp_path, make_config())
    async with again.run_test(size=SIZE) as pilot:
        assert again.theme == "didactyl-light"
        # Styled with it from the first frame (the theme is set without the usual re-style).
        light = again.get_theme("didactyl-light")
        assert light is not None and light.background is not None
        assert again.screen.styles.background == Color.parse(light.background)
        assert again.has_class("-light-mode", "-theme-didactyl-light") and not again.has_class("-dark-mode")


async def test_a_bad_theme_file_warns_instead_of_crashing(tmp_path: Path) -> None:
    themes = tmp_path / "themes"
    themes.mkdir()
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "not a colour"\n')
    (themes / "mine.toml").write_text('name = "mine"\nprimary = "#336699"\ndark = true\n')
    cfg = make_config()
    cfg.ui.themes_dir = str(themes)
    cfg.ui.theme = "mine"
    app = make_app(tmp_path / "data", cfg)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)  # not torn down mid-mount (a pane's on_mount then finds no children)
        assert app.theme == "mine"
        notes = [(n.title, n.message) for n in app._notifications]
        assert any(t == "Theme skipped" and "broken.toml" in m and "primary" in m for t, m in notes), notes


def dry_runs(app: DidactylApp) -> list[object]:
    """The dry runs under way (a Textual worker each, started as the key is handled)."""
    return [w for w in app.workers if w.group == "dry_run"]


async def test_keys_are_remappable_from_config(tmp_path: Path) -> None:
    cfg = make_config()
    cfg.keys = {"dry_run": "f12", "not_an_action": "f11"}
    app = make_app(tmp_path, cfg)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        notes = [n.message for n in app._notifications]
        assert any("not_an_action" in m for m in notes), notes
        main = app.main_screen
        await pilot.press("f5")  # the old key no longer does it: the key is handled and no dry run started
        assert not [w for w in main.workers if w.group == "dry_run"] and main.inspector.entries == []
        await pilot.press("f12")
        await wait_for(pilot, lambda: main.inspector.entries, 10, "a dry run from the remapped key")


async def test_a_remapped_key_works_on_every_screen_and_the_palette_shows_it(tmp_path: Path) -> None:
    """[keys] dry_run remaps it on the inspector detail too; the editor's keys remap as well."""
    from didactyl_tui.tui.screens.inspector_detail import InspectorDetailScreen
    from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen

    cfg = make_config()
    cfg.keys = {"dry_run": "f12", "editor_close": "f10"}
    app = make_app(tmp_path, cfg)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        hits = {h.text: h.help async for h in DidactylCommands(main).discover()}
        assert hits["Dry run"].endswith("(f12)") and hits["New chat"].endswith("(ctrl+n)"), hits
        await pilot.press("f12")
        await wait_for(pilot, lambda: len(main.inspector.entries) == 1, 10, "a dry run from the main screen")
        main.inspector.assembly_tree.focus()
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, InspectorDetailScreen), 10, "the detail screen")
        await pilot.press("f5")  # the default key does nothing here either (handled: the screen stays)
        assert isinstance(app.screen, InspectorDetailScreen) and len(main.inspector.entries) == 1
        assert not [w for w in main.workers if w.group == "dry_run"]
        await pilot.press("f12")
        await wait_for(pilot, lambda: len(main.inspector.entries) == 2, 10, "a dry run from the detail screen")
        assert app.screen is main
        await pilot.press("f6")
        await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen), 10, "the editor")
        await pilot.press("f10")
        await wait_for(pilot, lambda: app.screen is main, 10, "the editor closed by its remapped key")


async def test_every_action_is_in_the_command_palette_and_runs(tmp_path: Path) -> None:
    titles = [a.title for a in PALETTE_ACTIONS]
    for wanted in ("New chat", "Resume a past chat", "Switch model", "Edit short-term memory",
                   "Edit long-term memory", "Dry run", "Toggle memory pane", "Toggle self pane",
                   "Toggle prompt inspector", "Change theme", "Copy the last reply",
                   "Export the conversation as markdown"):
        assert wanted in titles
    for action in PALETTE_ACTIONS:
        assert hasattr(MainScreen if action.scope == "main" else DidactylApp, f"action_{action.action_name}"), action
    for action in ("send", "newline", "cancel", "dry_run", "edit_short_term", "toggle_inspector", "quit"):
        assert action in KEY_ACTIONS

    app = make_app(tmp_path, make_config())
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        provider = DidactylCommands(app.main_screen)
        found = [hit.text for hit in [h async for h in provider.discover()]]
        assert found == titles
        # Through the real palette: type, pick, and it runs.
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"toggle self", "enter")
        await wait_for(pilot, lambda: app.main_screen.sidebar.active == "self", 5, "the self pane")


async def test_self_pane_shows_public_identity_relays_and_refused_events(tmp_path: Path) -> None:
    admin = TEST_KEY.__class__.from_hex("02" * 32)
    cfg = make_config()
    cfg.admin.pubkey = admin.public_key_hex
    app = make_app(tmp_path, cfg)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        # The admin publishes a profile; a version of the agent's memory that does not decrypt arrives.
        url = app.service.relays.embedded_url
        async with RelayClient(url, reconnect=False) as client:
            await client.publish(sign_event(admin, kind=0, content='{"name": "the admin"}', created_at=1_750_000_000),
                                 timeout=3)
            await client.publish(sign_event(TEST_KEY, kind=30078, content="not NIP-44 at all", created_at=1_750_000_005,
                                            tags=[["d", "short_term_memory"], ["app", "didactyl"]]), timeout=3)
        await pilot.press("f3")
        main = app.main_screen
        await wait_for(pilot, lambda: main.self_panes(), 5, "the self pane")
        await wait_for(pilot, lambda: "the admin" in screen_text(app), 10, "the admin's profile")
        text = screen_text(app)
        assert "didactyl-test" in text and "A test agent." in text
        assert TEST_KEY.npub[:14] in text
        assert f"● {EMBEDDED_LABEL}  connected" in text
        assert "Contacts (0)" in text
        await wait_for(pilot, lambda: "refused 1 bad event (undecryptable 1)" in screen_text(app), 5, "the count")
        assert main.memory_pane("short_term").snapshot.content == ""  # the bad version changed nothing


async def test_no_secret_reaches_the_screen(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("fine"))
        app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            main.chat_input.focus()
            await pilot.press(*"hello", "enter")
            await wait_for(pilot, lambda: main.conversation.last_reply() == "fine", 30)
            screens = []
            for pane in ("memory", "self", "inspector"):
                main.panes.show_pane(pane)
                await wait_for(pilot, lambda pane=pane: main.sidebar.active == pane
                               and main.query_one(f"TabPane#{pane}").region, 10, f"the {pane} pane")
                screens.append(app.export_screenshot())
            await pilot.press("f6")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "MemoryEditorScreen", 10, "the editor")
            screens.append(app.export_screenshot())
    secret_hex = TEST_KEY.secret_hex()
    nsec = TEST_KEY.nsec()
    for svg in screens:
        assert secret_hex not in svg and nsec not in svg and nsec[:20] not in svg


async def test_toggle_panes_export_and_copy(tmp_path: Path) -> None:
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("The answer is **42**."))
        app = make_app(tmp_path, make_config(llm_base_url=stub.base_url))
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            main = app.main_screen
            slot = main.query_one("#sidebar-slot")
            await pilot.press("f2")  # memory is showing: f2 hides the sidebar
            assert not slot.display
            await pilot.press("f4")
            assert slot.display and main.sidebar.active == "inspector"
            await pilot.press("f3")
            assert main.sidebar.active == "self"

            main.chat_input.focus()
            await pilot.press(*"question", "enter")
            await wait_for(pilot, lambda: main.conversation.last_reply() == "The answer is **42**.", 30)
            await pilot.press("f9")
            assert app.clipboard == "The answer is **42**."
            await pilot.press("ctrl+s")
            exports = tmp_path / "exports"
            await wait_for(pilot, lambda: exports.exists() and list(exports.glob("*.md")), 5, "the export")
            (exported,) = exports.glob("*.md")
            assert stat.S_IMODE(exported.stat().st_mode) == 0o600 and stat.S_IMODE(exports.stat().st_mode) == 0o700
            text = exported.read_text()
            assert "## You\n\nquestion" in text and "## Agent\n\nThe answer is **42**." in text


def every_screen_and_widget_with_bindings() -> list[type]:
    """Every class of ours that has BINDINGS: the app, its screens and dialogs, and the widgets."""
    import importlib
    import pkgutil

    import didactyl_tui.tui.screens as screens
    import didactyl_tui.tui.widgets as widgets
    from didactyl_tui.tui.app import DidactylApp

    found: list[type] = [DidactylApp]
    for package in (screens, widgets):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            found += [cls for cls in vars(module).values()
                      if isinstance(cls, type) and cls.__module__ == module.__name__ and "BINDINGS" in vars(cls)]
    return found


def test_every_binding_of_every_screen_and_dialog_comes_from_the_action_table() -> None:
    """So [keys] remaps each of them (a binding without a table id ignored it: the dialogs did), and the
    documented ids are all in use."""
    from didactyl_tui.config_file import render_example

    classes = every_screen_and_widget_with_bindings()
    names = {cls.__name__ for cls in classes}
    assert {"ConfirmScreen", "UnsavedChangesScreen", "DiffScreen", "FirstRunScreen", "ModelSwitchScreen",
            "RenameScreen", "MergeScreen", "MemoryEditorScreen", "MemoryHistoryScreen", "InspectorDetailScreen",
            "MainScreen"} <= names
    ids = set()
    for cls in classes:
        for binding in cls.BINDINGS:
            assert binding.id in KEY_ACTIONS, f"{cls.__name__}: {binding.key} -> {binding.action} is not in the table"
            ids.add(binding.id)
    assert ids == set(KEY_ACTIONS)
    example = render_example()
    for action in KEY_ACTIONS:
        assert f"{action} (" in example, action
