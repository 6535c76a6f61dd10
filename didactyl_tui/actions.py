"""The one table of the app's actions: ids, default keys, words. Pure data (no Textual, nothing of ours):
the TUI generates its bindings (and so the footer), the command palette and the ``[keys]`` check from it
(tui/actions.py), and config.toml.example documents ``[keys]`` from it.

An action's id is its binding id: ``[keys] dry_run = "f12"`` remaps it on every screen that has it (the main
screen and the inspector detail both do).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Action:
    id: str  # binding id, the name in [keys]
    scope: str  # whose BINDINGS: app, main, chat_input, inspector, inspector_detail, editor, history, dialog
    keys: str  # default keys, comma-separated ("" = only in the palette)
    label: str  # the footer's word for it
    doc: str  # what it does (config docs, palette help)
    title: str = ""  # its command-palette title ("" = not in the palette)
    action: str = ""  # the Textual action it runs (default: the id)
    show: bool = True  # in the footer
    priority: bool = False  # before the focused widget (the chat input would take f6/f7 and friends)

    @property
    def action_name(self) -> str:
        return self.action or self.id


def _main(id: str, keys: str, label: str, doc: str, title: str, *, show: bool = True) -> Action:
    return Action(id, "main", keys, label, doc, title, show=show, priority=True)


ACTIONS: tuple[Action, ...] = (
    # Not priority: a priority binding runs as the app reads the key, before the chat input has inserted the
    # characters typed just before it (a burst: a paste, `tmux send-keys 'hi' Enter`); ChatInput runs these two
    # in its own key order instead.
    Action("send", "chat_input", "enter", "Send", "send the message"),
    Action("newline", "chat_input", "shift+enter,ctrl+j", "Newline", "new line in the message", show=False),
    Action("cancel", "main", "escape", "Cancel reply", "stop a streaming reply", "Cancel the streaming reply"),
    _main("new_chat", "ctrl+n", "New chat", "start a new chat", "New chat"),
    _main("resume_chat", "ctrl+r", "Resume", "resume a past chat", "Resume a past chat", show=False),
    _main("switch_model", "ctrl+l", "Model", "switch the model, remembered in state.toml", "Switch model",
          show=False),
    _main("change_theme", "ctrl+t", "Theme", "change the theme, remembered in state.toml", "Change theme",
          show=False),
    _main("toggle_sidebar", "ctrl+b", "Sidebar", "show/hide the whole sidebar", "Toggle sidebar", show=False),
    _main("toggle_memory", "f2", "Memory", "show/hide the memory pane", "Toggle memory pane"),
    _main("toggle_self", "f3", "Self", "show/hide the self pane: profile, relays, contacts", "Toggle self pane"),
    _main("toggle_inspector", "f4", "Inspector", "show/hide the prompt inspector", "Toggle prompt inspector"),
    _main("dry_run", "f5", "Dry run", "assemble the next prompt without calling the model", "Dry run"),
    _main("edit_short_term", "f6", "Edit memory", "edit short-term memory", "Edit short-term memory"),
    _main("edit_long_term", "f7", "Edit long-term", "edit long-term memory, loading it first",
          "Edit long-term memory", show=False),
    _main("load_long_term", "f8", "Load long-term", "load long-term memory from the relays", "Load long-term memory",
          show=False),
    _main("copy_reply", "f9", "Copy reply", "copy the agent's last reply", "Copy the last reply", show=False),
    _main("export_markdown", "ctrl+s", "Export", "export the conversation as markdown",
          "Export the conversation as markdown", show=False),
    _main("regenerate", "ctrl+g", "Regenerate", "ask again for the last reply (the old one is replaced)",
          "Regenerate the last reply", show=False),
    _main("edit_last", "", "", "take back the last message to edit it and send it again (its reply is removed)",
          "Edit and resend the last message"),
    _main("copy_message", "", "", "pick any message of the chat and copy it", "Copy a message…"),
    _main("rename_chat", "", "", "give this chat a title (the resume list shows it)", "Rename this chat"),
    _main("delete_chat", "", "", "delete this chat and its messages, after asking", "Delete this chat"),
    _main("history_short_term", "", "", "every short-term version seen: diff two, roll back",
          "Short-term memory history"),
    _main("history_long_term", "", "", "every long-term version seen: diff two, roll back",
          "Long-term memory history"),
    _main("edit_soul", "", "", "edit the soul (linted before it is published; versioned like memory)",
          "Edit the soul"),
    _main("history_soul", "", "", "every soul version seen: diff two, roll back", "Soul history"),
    _main("edit_tasks", "", "", "edit the task list (the same save path as the agent's task tools)",
          "Edit the task list"),
    _main("history_tasks", "", "", "every task-list version seen: diff two, roll back", "Task list history"),
    _main("signer_wait_longer", "", "", "give the remote signer's approval (its auth_url) more time: what waits for "
          "it waits [signer] auth_timeout_s more", "Wait longer for the signer's approval"),
    Action("inspector_open", "inspector", "o", "Open entry", "open the selected prompt assembly", action="open"),
    Action("inspector_diff", "inspector", "d", "Diff vs previous", "diff it against the previous one", action="diff"),
    Action("detail_close", "inspector_detail", "escape", "Back", "close the assembly detail", action="close"),
    Action("detail_diff", "inspector_detail", "d", "Diff vs previous", "assembly detail: diff against the previous",
           action="diff"),
    Action("dry_run", "inspector_detail", "f5", "Dry run", "assemble the next prompt without calling the model"),
    Action("detail_expand", "inspector_detail", "e", "Expand all", "assembly detail: expand every node",
           action="expand_all"),
    Action("editor_save", "editor", "ctrl+s", "Save", "save in the memory editor", action="save", priority=True),
    Action("editor_close", "editor", "escape", "Close", "close the memory editor (asks if unsaved)",
           action="close", priority=True),  # one press: the text area would take the first Esc
    Action("history_diff", "history", "d", "Diff", "memory history: diff the selected version", action="diff"),
    Action("history_mark", "history", "m,space", "Mark", "memory history: mark a version to compare with",
           action="mark"),
    Action("history_rollback", "history", "r", "Roll back", "memory history: roll back to the selected version",
           action="rollback"),
    Action("history_close", "history", "escape", "Close", "close the memory history", action="close"),
    # Every dialog (confirm, unsaved changes, roll back, rename, model, first run, diff) and the merge view: each
    # binds the ones it has, under its own footer word. Priority: the dialog answers before the field in it, and
    # a key takes effect in the order it was typed (a Tab bubbling up from a field came after the letters typed
    # behind it: they landed in the field the Tab was leaving).
    Action("close", "dialog", "escape", "Close", "close a dialog: cancel, keep editing, keep theirs (merge view)",
           priority=True),
    Action("confirm", "dialog", "ctrl+s", "Confirm", "a dialog's main button: yes, save, rename, use this model, "
           "set a model now", priority=True),
    Action("model_draft", "dialog", "ctrl+g", "Draft with the model", "merge view: ask the model to resolve the "
           "marked conflicts (shown as a diff to accept or discard)", priority=True),
    Action("focus_next", "dialog", "tab", "Next", "a dialog's next field or button", action="app.focus_next",
           show=False, priority=True),
    Action("focus_previous", "dialog", "shift+tab", "Previous", "a dialog's previous field or button",
           action="app.focus_previous", show=False, priority=True),
    Action("tool_permissions", "app", "", "", "the tools that act without asking, each revocable (MCP servers' "
           "tools, write_file, post_note)", "Tools always allowed…"),
    Action("command_palette", "app", "ctrl+p", "Palette", "open the command palette", show=False, priority=True),
    Action("quit", "app", "ctrl+q", "Quit", "quit, asking first when that would lose work", "Quit", priority=True),
)


def _documented() -> dict[str, Action]:
    out: dict[str, Action] = {}
    for a in ACTIONS:
        if a.keys:
            out.setdefault(a.id, a)
    return out


KEY_ACTIONS: dict[str, str] = {id: f"{a.doc} ({a.keys})" for id, a in _documented().items()}
"""Every action ``[keys]`` can remap -> what it does and its default keys."""

def keys_documentation(width: int = 110) -> list[str]:
    """The ``[keys]`` part of config.toml.example: every action id with its default keys, as comments."""
    lines, line = [], "#  "
    items = [f"{id} ({a.keys}: {a.doc})" for id, a in _documented().items()]
    for i, item in enumerate(items):
        piece = f" {item}{',' if i < len(items) - 1 else '.'}"
        if len(line) + len(piece) > width:
            lines.append(line)
            line = "#  "
        line += piece
    lines.append(line)
    return lines


def check_keymap(keys: Mapping[str, str]) -> dict[str, str]:
    """Problems per action in a ``[keys]`` table (unknown action, empty key); empty when all is well."""
    problems: dict[str, str] = {}
    for action, key in keys.items():
        if action not in KEY_ACTIONS:
            problems[action] = "no such action (see config.toml.example for the list)"
        elif not key.strip():
            problems[action] = "empty key"
    return problems



def keys_for(action_id: str, keymap: Mapping[str, str] | None = None) -> str:
    """The keys that run an action now (a ``[keys]`` remap in ``keymap``, else the table's default), as a person
    reads them (``escape`` → ``Esc``, ``ctrl+s`` → ``Ctrl+S``, several joined by ``/``)."""
    action = next(a for a in ACTIONS if a.id == action_id)
    keys = (keymap or {}).get(action.id, action.keys)
    return "/".join(_readable(key) for key in keys.split(",") if key.strip())


def _readable(key: str) -> str:
    """``ctrl+l`` → ``Ctrl+L``, ``f12`` → ``F12``; a letter alone stays as typed (``o``, not shift+o's ``O``)."""
    words = {"escape": "Esc", "enter": "Enter", "space": "Space", "tab": "Tab"}
    parts = key.strip().split("+")
    return "+".join(words.get(part, part.capitalize() if len(part) > 1 else part.upper() if len(parts) > 1 else part)
                    for part in parts)


def no_model_line(keymap: Mapping[str, str] | None = None) -> str:
    """How to set a model, as every place that finds none says it (after "No model configured"): the app's model
    dialog first (its key, remaps included), then the config file and the environment."""
    return (f"choose a model in the app with {keys_for('switch_model', keymap)}, or set [llm] model in config.toml "
            "or $DIDACTYL_MODEL (e.g. openai/gpt-4o-mini)")
