"""Every main-screen action in the command palette (ctrl+p), found by fuzzy search."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

# (title, help, main-screen action)
PALETTE_ACTIONS: tuple[tuple[str, str, str], ...] = (
    ("New chat", "Start a new conversation", "new_chat"),
    ("Resume a past chat", "Pick a saved conversation to continue", "resume_chat"),
    ("Switch model", "Choose the litellm model (remembered in state.toml)", "switch_model"),
    ("Edit short-term memory", "Open short-term memory in the editor", "edit_short_term"),
    ("Edit long-term memory", "Open long-term memory in the editor (loads it first)", "edit_long_term"),
    ("Load long-term memory", "Fetch long-term memory from the relays", "load_long_term"),
    ("Short-term memory history", "Every version seen: diff two, roll back", "history_short_term"),
    ("Long-term memory history", "Every version seen: diff two, roll back", "history_long_term"),
    ("Dry run", "Assemble the next prompt without calling the model", "dry_run"),
    ("Toggle memory pane", "Show or hide short- and long-term memory", "toggle_memory"),
    ("Toggle self pane", "Show or hide the agent's profile, relays and contacts", "toggle_self"),
    ("Toggle prompt inspector", "Show or hide the prompt inspector", "toggle_inspector"),
    ("Toggle sidebar", "Show or hide the whole sidebar", "toggle_sidebar"),
    ("Change theme", "Pick a theme (remembered in state.toml)", "change_theme"),
    ("Copy the last reply", "Copy the agent's last reply to the clipboard", "copy_reply"),
    ("Export the conversation as markdown", "Write this conversation to a .md file", "export_markdown"),
    ("Cancel the streaming reply", "Stop the reply being written", "cancel"),
)


class DidactylCommands(Provider):
    """Actions of the main screen; hidden while another screen (editor, dialog) is on top."""

    def _actions(self):
        from .screens.main import MainScreen

        screen = self.screen
        if not isinstance(screen, MainScreen):
            return
        for title, help_text, action in PALETTE_ACTIONS:
            yield title, help_text, partial(screen.run_action, action)

    async def discover(self) -> Hits:
        for title, help_text, run in self._actions():
            yield DiscoveryHit(title, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, run in self._actions():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), run, help=help_text)
