"""The agent's key in a remote signer that asks for approval or signs with another key, in the app (the scripted
bunker of tests/nip46_bunker.py, the key only there).

An approval (an auth_url) is a notification naming the link (outside text: no markup) and how long the save waits;
the palette's "Wait longer for the signer's approval" gives it more time (that a request given more time outlives its
deadline is tested with the signer alone: tests/nostr/test_nostr_remote_signer.py). A signer that signs with another
key than the stored connection's: said at start with the command that reconnects, and the editor's save says it too
and keeps the text."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_support import AGENT_KEY
from nip46_bunker import ScriptedBunker
from tui_support import SIZE, make_app, make_config, make_env, screen_text, started, wait_for

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.identity.signer_session import write_session
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip46_session import RemoteSignerSession
from didactyl_tui.tui.screens.memory_editor import MemoryEditorScreen


def recorded_notifications(app) -> list[str]:
    """What the app notifies from now on; a warning or a signer's notice is shown as plain text (its outside words, a
    link or a reason, are never read as markup)."""
    shown: list[str] = []
    notify = app.notify

    def recorded(message: str, **kwargs) -> None:
        if kwargs.get("title") in ("Warning", "Remote signer"):
            assert kwargs.get("markup") is False, message
        shown.append(message)
        notify(message, **kwargs)

    app.notify = recorded  # (a screen's notify is the app's)
    return shown


async def test_the_signers_approval_is_shown_and_the_person_can_wait_longer_than_its_deadline(tmp_path: Path) -> None:
    url = "https://signer.example/approve?[b]id[/b]=7"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as relay, \
            ScriptedBunker([relay.url], AGENT_KEY, secret="once", auth_methods={"sign_event"}) as bunker:
        config = make_config(publish_profile=False)
        config.signer.bunker = bunker.bunker_uri()
        config.signer.request_timeout_s = config.signer.auth_timeout_s = 5.0  # time enough to reach the palette
        env = make_env()
        del env["DIDACTYL_NSEC"]  # the key is only in the bunker
        app = make_app(tmp_path / "data", config, env=env)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            shown = recorded_notifications(app)
            pilot.app.main_screen.action_signer_wait_longer()
            await wait_for(pilot, lambda: "Nothing waits for the signer's approval." in shown, 10, "nothing waits")
            bunker.auth_url = url  # from now on the signer asks the person before it signs
            saving = asyncio.create_task(app.service.documents.save(DocumentKey.SHORT_TERM, "approved in time"))
            [line] = await wait_for(pilot, lambda: [m for m in shown if "asks you to approve" in m], 10,
                                    "the approval shown")
            assert f"open {url} — waiting up to " in line  # the link as sent: never read as markup
            assert "ctrl+p, \"Wait longer for the signer's approval\"" in line
            await pilot.press("ctrl+p")
            await pilot.pause()
            await pilot.press(*"wait longer", "enter")
            await wait_for(pilot, lambda: "Waiting 5 s more for the signer's approval (1 request)." in shown, 10,
                           "more time given")
            assert not saving.done()  # (that it then outlives its deadline: test_nostr_remote_signer.py)
            await bunker.approve()
            assert (await asyncio.wait_for(saving, 20)).any_accepted


async def test_a_signer_that_now_signs_with_another_key_is_explained_and_the_editor_keeps_the_text(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    other = SecretKey.from_hex("00" * 31 + "d1")
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as relay, \
            ScriptedBunker([relay.url], other, signer_key=SecretKey.from_hex("00" * 31 + "d2")) as bunker:
        client = SecretKey.generate()  # signer.json as an earlier run left it, for the agent's key
        write_session(data, RemoteSignerSession(client.secret_hex(), bunker.pubkey, (relay.url,),
                                                AGENT_KEY.public_key_hex, True))
        bunker.connected.add(client.public_key_hex)
        config = make_config(publish_profile=False)
        config.signer.bunker = bunker.bunker_uri()
        env = make_env()
        del env["DIDACTYL_NSEC"]
        app = make_app(data, config, env=env)
        shown = recorded_notifications(app)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            [line] = await wait_for(pilot, lambda: [m for m in shown if "didactyl signer connect" in m], 30,
                                    "the wrong key explained at start")
            assert line.startswith("the remote signer now signs as npub1")
            await pilot.press("f6")
            editor = await wait_for(pilot, lambda: isinstance(app.screen, MemoryEditorScreen) and app.screen)
            editor.text_area.load_text("my edit")
            await pilot.pause()
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: "Not saved: the remote signer signed with the key npub1" in
                           " ".join(screen_text(app).split()), 20, "the save refused, saying why")
            assert editor.text_area.text == "my edit"  # kept to save again once reconnected
