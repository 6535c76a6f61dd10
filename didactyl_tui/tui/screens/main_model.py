"""The main screen's model, key and theme: the model dialog (usable before the service has started), switching the
model (written off the UI loop), the model in the status bar, more time for the signer's approval, and the theme
picker.

A part the main screen owns (:class:`ModelControls`): its own state (is the helper wanted, is it warming), the
screen it shows on handed to it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .part_work import work_on_screen

if TYPE_CHECKING:
    from ...service.screen_api import ScreenService
    from .main_view import MainView


HELPER_READY_S = 120.0  # the longest the status bar says the model loads (litellm's import: ~8 s, more under load)


class ModelControls:
    """The model's helper warmed when a model is about to be needed, the model dialog and switch, the model in the
    status bar, the theme picker and more time for the signer (the screen's bindings call these)."""

    def __init__(self, screen: MainView) -> None:
        self.screen = screen
        self.wanted = False  # a model was needed before the service object existed: warmed once it does
        self._warming = False

    def needed(self) -> None:
        """A model is about to be needed (a key typed in the message box, a message sent, a dry run): its helper
        process starts unless it runs (it stops again when unused: ``[llm] helper_idle_exit_s``), and the status
        bar says so while it loads. Cheap when it runs (called on every edit of the message box)."""
        service = self.screen.didactyl.service
        if service is None:
            self.wanted = True
            return
        self.wanted = False
        if self._warming or service.attached_to is not None or not service.model.configured:
            return
        if not service.model.client_warm():
            self._warming = True
            self._warm_model(service)

    @work_on_screen(group="warm-model")
    async def _warm_model(self, service: ScreenService) -> None:
        self.screen.status.model_loading = True
        try:
            await asyncio.to_thread(service.model.warm_client)
            await asyncio.to_thread(service.model.wait_client, HELPER_READY_S)
        finally:
            self._warming = False
            self.screen.status.model_loading = False

    async def switch(self) -> None:
        from .model_switch import KeyPlace, ModelSwitchScreen

        service = self.screen.didactyl.service
        if service is None:
            dialog = ModelSwitchScreen(self.screen.config.llm.model)
        else:
            # The model helper starts while the user fills the dialog: its start is not the server's time.
            self.screen.run_worker(asyncio.to_thread(service.model.warm_client), group="warm-model",
                                   exit_on_error=False)
            dialog = ModelSwitchScreen(service.model.settings, explanation=service.model.explain(),
                                       shadowed=service.model.shadowed(), check=service.model.check,
                                       key_place=KeyPlace(str(service.model.api_key_file), service.model.key_problem))
        # Awaited: keys typed behind the one that opened it wait for the dialog, instead of reaching this screen.
        await self.screen.app.push_screen(dialog, self._chosen)

    def _chosen(self, chosen: Any) -> None:
        if chosen is not None and self.screen.service_or_notify() is not None:
            self._set_model(chosen)

    @work_on_screen(exclusive=True, group="model")
    async def _set_model(self, chosen: Any) -> None:
        service = self.screen.require_service()
        # Writes state.toml (and the key file with a key typed): off the UI loop. No restart: the next turn uses it.
        await asyncio.to_thread(service.model.set, chosen)
        service.preload_llm()  # a model now: its first turn should not wait for the import
        self.show(service)
        shadowed = service.model.shadowed()
        if shadowed:
            self.screen.notify(shadowed, title=f"Model: {service.model.name}", severity="warning", timeout=12)
        elif chosen.api_key:
            self.screen.notify(f"Model: {service.model.name}; its key is kept in {service.model.api_key_file} (0600), "
                               f"as ${service.model.settings.api_key_env}", title="Model switched")
        else:
            self.screen.notify(f"Model: {service.model.name}", title="Model switched")

    def show(self, service: ScreenService) -> None:
        """The model in the status bar, marked when $DIDACTYL_MODEL decides it or hides a choice."""
        if service.attached_to is not None:  # no model here: the agent's runs where it runs
            from ...service.types import encode_npub

            self.screen.status.attached_to = encode_npub(service.attached_to)
            return
        status = self.screen.status
        status.model = service.model.name
        status.model_note = "$DIDACTYL_MODEL" if service.model.source == "env" else ""
        status.model_warning = service.model.shadowed() is not None

    def change_theme(self) -> None:
        self.screen.app.search_themes()

    def signer_wait_longer(self) -> None:
        """The person needs more time to approve at the signer's auth_url (no network: the deadline moves)."""
        didactyl = self.screen.didactyl
        service = didactyl.service if didactyl.service_ready else None
        waiting = service.wait_longer_for_signer() if service is not None else 0
        if waiting:
            self.screen.notify(f"Waiting {didactyl.config.signer.auth_timeout_s:g} s more for the signer's approval "
                               f"({waiting} request{'s' if waiting > 1 else ''}).", title="Remote signer", markup=False)
        else:
            self.screen.notify("Nothing waits for the signer's approval.", title="Remote signer", markup=False)
