"""The status bar says "signer away" while the agent's remote signer does not answer, and stops saying it once the
signer answers again (the service's SignerStateChanged; the service side is in test_service_remote_signer.py)."""

from __future__ import annotations

from pathlib import Path

from tui_support import SIZE, make_app, make_config, screen_text, started, wait_for

from didactyl_tui.service.events import SignerStateChanged


async def test_the_status_bar_shows_the_signer_away_and_back(tmp_path: Path) -> None:
    app = make_app(tmp_path, make_config(publish_profile=False))
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        assert "signer away" not in screen_text(app)
        main.on_service_event(SignerStateChanged(False))
        await wait_for(pilot, lambda: "signer away" in screen_text(app), 10, "signer away in the status bar")
        main.on_service_event(SignerStateChanged(True))
        await wait_for(pilot, lambda: "signer away" not in screen_text(app), 10, "the status bar cleared")

