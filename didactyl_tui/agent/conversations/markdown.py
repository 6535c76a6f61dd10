"""A stored conversation as a markdown document (the export command)."""

from __future__ import annotations

import json
import time
from typing import Any

from ..turn.record import answered_in_part, unanswered_note
from .session_info import SessionInfo


def render_markdown(info: SessionInfo, messages: list[dict[str, Any]]) -> str:
    """Title, start time, then each message under its speaker; tool calls and results as code blocks."""
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.created_at))
    out = [f"# {info.title or 'Conversation'}", "", f"_Started {created} · {info.message_count} messages_", ""]
    for n, message in enumerate(messages):
        role = message["role"]
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False) if content else ""
        status = message.get("status")
        if role == "user":
            following = messages[n + 1] if n + 1 < len(messages) else None
            note = unanswered_note(status, in_part=answered_in_part(following)) if status else ""
            out += [f"## You ({note})" if note else "## You", "", text, ""]
        elif role == "assistant":
            out += [f"## Agent ({status})" if status else "## Agent", ""]
            if text:
                out += [text, ""]
            for call in message.get("tool_calls") or ():
                fn = call.get("function", {})
                out += [f"**Tool call** `{fn.get('name', '')}`", "", "```json", fn.get("arguments", "") or "{}",
                        "```", ""]
        elif role == "tool":
            ending = f", {message['ending']}" if message.get("ending") else ""
            out += [f"**Tool result** (`{message.get('tool_call_id', '')}`{ending})", "", "```", text, "```", ""]
        else:
            out += [f"## {role.capitalize()}", "", text, ""]
    return "\n".join(out).rstrip() + "\n"

