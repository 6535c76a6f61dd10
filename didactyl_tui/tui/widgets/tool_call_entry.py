"""A tool call shown inline in the conversation: collapsible, with its arguments and its result."""

from __future__ import annotations

import json
from typing import Any

from textual.content import Content
from textual.markup import escape
from textual.widgets import Collapsible, Static

from ...terminal_text import clean, one_line
from .diff_lines import diff_lines_content, tool_result_diff


def pretty_json(value: Any) -> str:
    """JSON (or JSON text) indented for reading; anything else as its string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


class ToolCallEntry(Collapsible):
    """``⚙ name · state``; expands to arguments and result."""

    def __init__(self, call_id: str, name: str, arguments: dict[str, Any], round_no: int = 1) -> None:
        self.call_id = call_id
        self.tool_name = name
        self.arguments = arguments
        self.round_no = round_no
        self.result: str | None = None
        self.ending = ""  # how the call ended (done, error, refused, cancelled); "" while it runs
        self._result_view = Static(Content("…"), classes="tool-call-result")
        self._change_heading = Static("change", classes="tool-call-heading -hidden")
        self._change_view = Static(Content(""), classes="tool-call-change -hidden")
        super().__init__(
            Static("arguments", classes="tool-call-heading"),
            Static(Content(clean(pretty_json(arguments))), classes="tool-call-args"),
            Static("result", classes="tool-call-heading"),
            self._result_view,
            self._change_heading,
            self._change_view,
            title=self._title_for("running…"),
            collapsed=True,
            classes="tool-call -running",
        )

    def _title_for(self, state: str) -> str:
        # Collapsible titles are markup: escape the name, which comes from the model.
        return f"⚙ {escape(one_line(self.tool_name))} · {state}"

    def set_result(self, result: str, ending: str, permission: str = "") -> None:
        """The call ended (``ending``: done, error, refused or cancelled; "" when a chat kept before endings were
        recorded does not say): show its result, or why it failed or did not run."""
        self.result = result
        self.ending = ending
        self.remove_class("-running")
        self.add_class(f"-{ending}" if ending in ("done", "error", "refused", "cancelled") else "-ended")
        self.permission = permission  # the permission gate's words, for a tool that acts
        state = escape(one_line(ending)) or "ended"
        self.title = self._title_for(f"{state} · {escape(one_line(permission))}" if permission else state)
        change = tool_result_diff(result) if ending in ("done", "") else None
        if change is None:
            self._result_view.update(Content(clean(pretty_json(result))))
            return
        rest, diff = change  # a change of a document (memory_insert, memory_replace): shown as a diff
        self._result_view.update(Content(clean(pretty_json(rest))))
        self._change_view.update(diff_lines_content(diff.split("\n")))
        for part in (self._change_heading, self._change_view):
            part.remove_class("-hidden")
