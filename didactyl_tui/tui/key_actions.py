"""The actions ``[keys]`` in config.toml can remap (binding ids), and a check of a user's keymap."""

from __future__ import annotations

from collections.abc import Mapping

# action id -> what it does (also the documentation rendered into config.toml.example)
KEY_ACTIONS: dict[str, str] = {
    "send": "send the message (enter)",
    "newline": "new line in the message (shift+enter, ctrl+j)",
    "cancel": "stop a streaming reply (escape)",
    "new_chat": "start a new chat (ctrl+n)",
    "resume_chat": "resume a past chat (ctrl+r)",
    "switch_model": "switch the model (ctrl+l)",
    "change_theme": "change the theme (ctrl+t)",
    "toggle_memory": "show/hide the memory pane (f2)",
    "toggle_self": "show/hide the self pane (f3)",
    "toggle_inspector": "show/hide the prompt inspector (f4)",
    "toggle_sidebar": "show/hide the sidebar (ctrl+b)",
    "dry_run": "assemble the next prompt without calling the model (f5)",
    "edit_short_term": "edit short-term memory (f6)",
    "edit_long_term": "edit long-term memory (f7)",
    "load_long_term": "load long-term memory (f8)",
    "copy_reply": "copy the last reply (f9)",
    "export_markdown": "export the conversation as markdown (ctrl+s)",
    "inspector_open": "open the selected prompt assembly (o)",
    "inspector_diff": "diff it against the previous one (d)",
    "editor_save": "save in the memory editor (ctrl+s)",
    "editor_close": "close the memory editor (escape)",
    "history_diff": "memory history: diff the selected version (d)",
    "history_mark": "memory history: mark a version to compare with (m, space)",
    "history_rollback": "memory history: roll back to the selected version (r)",
    "history_close": "close the memory history (escape)",
    "command_palette": "open the command palette (ctrl+p)",
    "quit": "quit (ctrl+q)",
}


def check_keymap(keys: Mapping[str, str]) -> dict[str, str]:
    """Problems per action in a ``[keys]`` table (unknown action, empty key); empty when all is well."""
    problems: dict[str, str] = {}
    for action, key in keys.items():
        if action not in KEY_ACTIONS:
            problems[action] = "no such action (see config.toml.example for the list)"
        elif not key.strip():
            problems[action] = "empty key"
    return problems
