"""The app never opens another agent's conversation (#31): run here (this data dir's agent, a model configured), a
conversation kept with an agent elsewhere (``didactyl attach``) is listed as that agent's in the resume palette, and
opening it (from the palette, or as the chat to open on) says how to open it attached and leaves it unanswered here."""

from __future__ import annotations

from pathlib import Path

from agent_support import AGENT_KEY
from tui_support import SIZE, make_app, make_config, screen_text, started, wait_for

from didactyl_tui.agent.conversations.store import ConversationStore

HOW = "which runs elsewhere: open it attached (didactyl --session"


def kept_conversations(data: Path) -> tuple[str, str]:
    data.mkdir(parents=True, exist_ok=True)
    store = ConversationStore(data / "conversations.sqlite3")
    try:
        mine = store.new_session("tea with my agent")
        store.append(mine, [{"role": "user", "content": "green or black?"}, {"role": "assistant", "content": "Green."}])
        theirs = store.new_session("relays with the served agent", agent=AGENT_KEY.public_key_hex)
        store.append(theirs, [{"role": "user", "content": "which relay?"},
                              {"role": "assistant", "content": "Said by the agent elsewhere."}])
    finally:
        store.close()
    return mine, theirs


async def test_the_local_app_says_how_to_open_an_attached_conversation_and_never_loads_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    mine, theirs = kept_conversations(data)
    app = make_app(data, make_config(publish_profile=False))
    app.open_session_id = theirs  # what `--continue` chose before conversations knew their agent
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        main = app.main_screen
        await wait_for(pilot, lambda: any(HOW in str(n.message) for n in app._notifications), 15, "how to open it")
        assert main.chat.session_id is None and "Said by the agent elsewhere." not in screen_text(app)

        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "CommandPalette", 10, "the resume palette")
        await wait_for(pilot, lambda: f"with {AGENT_KEY.npub[:16]}…, elsewhere" in screen_text(app), 10,
                       lambda: f"the attached chat marked in:\n{screen_text(app)}")
        await pilot.press("escape")
        main.saved_chats.resume(mine)  # this data dir's own conversation opens as ever
        await wait_for(pilot, lambda: main.chat.session_id == mine and "Green." in screen_text(app), 15, "its own chat")
