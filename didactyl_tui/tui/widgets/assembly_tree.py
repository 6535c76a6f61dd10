"""A tree of prompt assemblies: every section with role, source tool, tokens and content; skipped sections
greyed with their reason; the memory backend's context; the tools offered; the history; the reply and the
tool rounds; totals. Used by the inspector pane (many entries) and the detail screen (one, fully open)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.style import Style
from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from ...service.labels import CLOCK, when
from ...terminal_text import clean
from .diff_lines import tool_result_diff

if TYPE_CHECKING:
    from ...service.types import PromptAssembly, ToolCallFinished, Usage

PREVIEW_LINES = 30  # content lines shown per node in the pane; the detail screen shows everything


def prompt_tokens(assembly: PromptAssembly, usage: Usage | None) -> tuple[int, bool]:
    """The one count of a turn's prompt, for the status bar and the inspector alike: the model's own count of
    the turn's last request once it reported one (what that request took of the context window), else ours
    from the assembly. Returns (tokens, estimated)."""
    if usage is not None:
        counted = usage.last_prompt_tokens if usage.last_prompt_tokens is not None else usage.prompt_tokens
        if counted is not None:
            return counted, False
    return assembly.total_tokens, True


def tokens_label(tokens: int, estimated: bool) -> str:
    return f"{'~' if estimated else ''}{tokens:,} tok"


def policy_line(assembly: PromptAssembly) -> str:
    """Whom the prompt was for, and what that withheld (agent/audience.py)."""
    if assembly.audience == "admin":
        return f"Policy: admin · everything · {assembly.audience_who or 'the admin'}"
    withheld = len(assembly.withheld) + (1 if assembly.backend_withheld else 0)
    return f"Policy: guest · {withheld} withheld, only what is for everyone · {assembly.audience_who}"


@dataclass
class InspectorEntry:
    """One assembly and what came of it (the reply arrives later than the assembly)."""

    number: int
    assembly: PromptAssembly
    reply: str | None = None
    tool_calls: list[ToolCallFinished] = field(default_factory=list)
    usage: Usage | None = None
    failure: str | None = None

    @property
    def label(self) -> str:
        a = self.assembly
        kind = "dry run" if a.dry_run else "agent's turn" if (a.extra or {}).get("remote") else "turn"
        at = when(a.created_at, CLOCK)
        return f"#{self.number} {kind} · {at} · {tokens_label(*prompt_tokens(a, self.usage))} · {a.model or 'no model'}"


@dataclass(frozen=True)
class NodeInfo:
    entry_number: int
    kind: str  # "entry", "section", "line", "meta", ...
    style: str | None = None  # a component class name (without the prefix) for the label


def _lines(text: str, limit: int | None) -> tuple[list[str], int]:
    lines = text.splitlines() or [""]
    if limit is None or len(lines) <= limit:
        return lines, 0
    return lines[:limit], len(lines) - limit


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False) if content else ""
    calls = message.get("tool_calls") or []
    for call in calls:
        fn = call.get("function", {})
        text += f"\n→ {fn.get('name')}({fn.get('arguments', '')})"
    return text.strip()


def _diff_style(line: str) -> str | None:
    if line.startswith(("+++", "---")):
        return "heading"
    return "added" if line.startswith("+") else "removed" if line.startswith("-") else None


def _text_of(node: TreeNode[NodeInfo]) -> Text:
    """A node's label: Text once set (Tree.process_label makes a str one Text), typed by Textual as either."""
    label = node.label
    return label if isinstance(label, Text) else Text(label)


def _label(text: str) -> Text:
    """A node's label: prompts quote memories, the model and relays, so control characters go."""
    return Text(clean(text, newlines=False, tabs=False))


class AssemblyTree(Tree[NodeInfo]):
    """Attributes down: :meth:`add_entry` and :meth:`refresh_entry`."""

    COMPONENT_CLASSES = {
        "assembly-tree--skipped",
        "assembly-tree--meta",
        "assembly-tree--heading",
        "assembly-tree--error",
        "assembly-tree--added",
        "assembly-tree--removed",
    }

    def __init__(self, *, preview_lines: int | None = PREVIEW_LINES, cut_hint: str | None = None,
                 id: str | None = None) -> None:
        # A narrow pane's lines are cut to fit, each cut one ending with this (an ellipsis and the key that opens the
        # entry whole); None: lines stay whole (the detail screen scrolls sideways). Set first: the root's label is
        # rendered while the tree is made.
        self.cut_hint = cut_hint
        super().__init__("Prompt assemblies", id=id)
        self.show_root = False
        self.guide_depth = 3
        self.preview_lines = preview_lines
        self.entries: dict[int, InspectorEntry] = {}
        self._entry_nodes: dict[int, TreeNode[NodeInfo]] = {}

    def render_label(self, node: TreeNode[NodeInfo], base_style: Style, style: Style) -> Text:
        label = self._styled_label(node, base_style, style)
        return label if self.cut_hint is None else self._fitted(node, label)

    def _fitted(self, node: TreeNode[NodeInfo], label: Text) -> Text:
        """``label`` cut to the room its line has beside its guides, ending with the cut hint."""
        width = self.scrollable_content_region.width
        depth, parent = 0, node.parent
        while parent is not None and parent is not self.root:
            depth, parent = depth + 1, parent.parent
        room = width - depth * self.guide_depth
        hint = self.cut_hint or ""
        if width <= 0 or label.cell_len <= room or room <= len(hint) + 1:
            return label
        cut = label.copy()
        cut.truncate(room - len(hint))
        cut.rstrip()
        cut.append(hint, style=self.get_component_rich_style("assembly-tree--meta", partial=True))
        return cut

    def _styled_label(self, node: TreeNode[NodeInfo], base_style: Style, style: Style) -> Text:
        info = node.data
        if info is not None and info.style:
            node_label = _text_of(node).copy()
            node_label.stylize(style)
            # After the line's own style, so the greyed / error colour wins over the default text colour.
            node_label.stylize(self.get_component_rich_style(f"assembly-tree--{info.style}", partial=False))
            prefix = (self.ICON_NODE_EXPANDED if node.is_expanded else self.ICON_NODE) if node.allow_expand else ""
            return Text.assemble((prefix, base_style), node_label)
        return super().render_label(node, base_style, style)

    # --- building -------------------------------------------------------------------------------

    def add_entry(self, entry: InspectorEntry, *, expand: bool = False) -> TreeNode[NodeInfo]:
        self.entries[entry.number] = entry
        node = self.root.add(_label(entry.label), data=NodeInfo(entry.number, "entry", "heading"), expand=expand)
        self._entry_nodes[entry.number] = node
        self._fill(node, entry)
        self.root.expand()
        return node

    def remove_entry(self, number: int) -> None:
        self.entries.pop(number, None)
        node = self._entry_nodes.pop(number, None)
        if node is not None:
            node.remove()

    def clear_entries(self) -> None:
        self.entries.clear()
        self._entry_nodes.clear()
        self.root.remove_children()

    def refresh_entry(self, entry: InspectorEntry) -> None:
        node = self._entry_nodes.get(entry.number)
        if node is None:
            return
        node.set_label(_label(entry.label))
        was_open = {_text_of(child).plain for child in node.children if child.is_expanded}
        node.remove_children()
        self._fill(node, entry)
        for child in node.children:
            if _text_of(child).plain in was_open:
                child.expand()

    def node_for(self, number: int) -> TreeNode[NodeInfo] | None:
        return self._entry_nodes.get(number)

    def entry_at_cursor(self) -> InspectorEntry | None:
        node = self.cursor_node
        while node is not None and node.data is not None and node.data.kind != "entry":
            node = node.parent
        if node is None or node.data is None:
            return None
        return self.entries.get(node.data.entry_number)

    def _text_leaves(self, parent: TreeNode[NodeInfo], number: int, text: str, style: str | None = None, *,
                     diff: bool = False) -> None:
        """``text``'s lines as leaves (``diff``: a unified diff, its added and removed lines coloured)."""
        lines, more = _lines(text, self.preview_lines)
        for line in lines:
            parent.add_leaf(_label(line or " "), data=NodeInfo(number, "line", _diff_style(line) if diff else style))
        if more:
            parent.add_leaf(_label(f"… {more} more lines (open the entry to see all)"),
                            data=NodeInfo(number, "meta", "meta"))

    def _backend_layer(self, parent: TreeNode[NodeInfo], entry: InspectorEntry) -> None:
        """The memory backend's context as a layer of its own, labelled like a section, with where it is sent."""
        a, n = entry.assembly, entry.number
        where = "end of the system message" if a.backend_place == "system" else "after the history"
        head = f"memory_backend [system] · backend {a.backend_id} · {where}"
        if a.backend_withheld:
            parent.add_leaf(_label(f"{head} · skipped: {a.backend_withheld}"), data=NodeInfo(n, "backend", "skipped"))
            return
        if not a.backend_context:
            parent.add_leaf(_label(f"{head} · skipped: no context this turn"), data=NodeInfo(n, "backend", "skipped"))
            return
        backend = parent.add(_label(f"{head} · {a.backend_tokens:,} tok"), data=NodeInfo(n, "backend"))
        self._text_leaves(backend, n, a.backend_context)

    def _fill(self, node: TreeNode[NodeInfo], entry: InspectorEntry) -> None:
        a = entry.assembly
        n = entry.number
        remote = (a.extra or {}).get("remote") or {}
        if remote.get("unavailable"):  # attached: the agent sent no assembly for this reply; nothing is guessed
            node.add_leaf(_label(f"Prompt assembly: not available — {remote['unavailable']}"),
                          data=NodeInfo(n, "meta", "meta"))
            if entry.reply is not None:
                self._text_leaves(node.add(_label("Reply"), data=NodeInfo(n, "reply")), n, entry.reply or "(empty)")
            return
        node.add_leaf(_label(policy_line(a)), data=NodeInfo(n, "policy", "meta"))
        used = [layer for layer in a.layers if not layer.skipped]
        section_tokens = sum(layer.tokens for layer in used)
        skipped = len(a.layers) - len(used)
        sections = node.add(
            _label(f"Sections: {len(used)} used, {skipped} skipped · {section_tokens:,} tok"),
            data=NodeInfo(n, "sections"),
        )
        # The backend's context placed in the system message is a layer of its own, where it is sent: after the
        # leading system sections (before the first user/assistant section that is sent).
        in_system = bool(a.backend_id) and a.backend_place == "system"
        for layer in a.layers:
            if in_system and not layer.skipped and layer.role != "system":
                self._backend_layer(sections, entry)
                in_system = False
            tool = f" · {layer.tool}" if layer.tool else " · static"
            if layer.skipped:
                label = f"{layer.section} [{layer.role}]{tool} · skipped: {layer.skip_reason or 'no reason given'}"
                if not layer.content and layer.source_event is None:
                    sections.add_leaf(_label(label), data=NodeInfo(n, "section", "skipped"))
                    continue
                child = sections.add(_label(label), data=NodeInfo(n, "section", "skipped"))
            else:
                label = f"{layer.section} [{layer.role}]{tool} · {layer.tokens:,} tok"
                child = sections.add(_label(label), data=NodeInfo(n, "section"))
            if layer.source_event is not None:
                src = layer.source_event
                at = when(src.created_at)
                relays = ", ".join(src.relays) if src.relays else "no relay confirmed yet"
                child.add_leaf(_label(f"source event {src.event_id} · {at} · on: {relays}"),
                               data=NodeInfo(n, "meta", "meta"))
            self._text_leaves(child, n, layer.content, "skipped" if layer.skipped else None)
        if in_system:
            self._backend_layer(sections, entry)

        if not a.backend_id:
            node.add_leaf(_label("Memory backend: none"), data=NodeInfo(n, "backend", "skipped"))

        tools = node.add(_label(f"Tools offered: {len(a.tools)}"), data=NodeInfo(n, "tools"))
        origins = a.tool_origins
        for schema in a.tools:
            fn = schema.get("function", {})
            desc = (fn.get("description") or "").strip().splitlines()
            origin = origins.get(fn.get("name", ""))
            source = f" · {origin}" if origin else ""
            child = tools.add(_label(f"{fn.get('name')}{source} — {desc[0] if desc else ''}"), data=NodeInfo(n, "tool"))
            self._text_leaves(child, n, json.dumps(fn.get("parameters", {}), indent=2, ensure_ascii=False))

        dropped = f", {a.history_dropped} older dropped" if a.history_dropped else ""
        count = f"{remote['history_messages']} messages (the conversation, at the agent)" if remote else \
            f"{len(a.history)} messages"
        history = node.add(_label(f"History: {count}{dropped}"), data=NodeInfo(n, "history"))
        for message in a.history:
            first = (_message_text(message).splitlines() or [""])[0]
            child = history.add(_label(f"{message.get('role', '?')}: {first[:120]}"), data=NodeInfo(n, "message"))
            self._text_leaves(child, n, _message_text(message))
        if a.backend_id and a.backend_place != "system":
            self._backend_layer(node, entry)

        if a.user_message is not None:
            user = node.add(_label("User message"), data=NodeInfo(n, "user"))
            self._text_leaves(user, n, a.user_message)

        if entry.tool_calls:
            rounds = node.add(_label(f"Tool rounds: {len(entry.tool_calls)} call(s)"), data=NodeInfo(n, "rounds"))
            for call in entry.tool_calls:
                permission = f" · {call.permission}" if call.permission else ""  # the permission gate's words
                child = rounds.add(_label(f"round {call.round}: {call.name} · {call.ending}{permission}"),
                                   data=NodeInfo(n, "call", "error" if call.is_error else None))
                child.add_leaf(_label("arguments: " + json.dumps(call.arguments, ensure_ascii=False)[:300]),
                               data=NodeInfo(n, "line"))
                self._text_leaves(child, n, "result: " + call.result)
                change = None if call.is_error else tool_result_diff(call.result)
                if change is not None:  # a document's change (memory_insert, memory_replace), as a diff
                    self._text_leaves(child.add(_label("change"), data=NodeInfo(n, "change")), n, change[1], diff=True)
        if entry.reply is not None:
            reply = node.add(_label("Reply"), data=NodeInfo(n, "reply"))
            self._text_leaves(reply, n, entry.reply or "(empty)")
        elif entry.failure is not None:
            node.add_leaf(_label(f"Failed: {entry.failure}"), data=NodeInfo(n, "failure", "error"))
        elif a.dry_run:
            node.add_leaf(_label("Dry run: the model was not called"), data=NodeInfo(n, "meta", "meta"))

        extra = a.extra or {}
        history_tokens = extra.get("history_tokens")
        if history_tokens is None:  # older records: whatever the sections and backend do not explain
            history_tokens = max(0, a.total_tokens - section_tokens - a.backend_tokens)
        breakdown = [f"sections {section_tokens:,}", f"history {int(history_tokens):,}",
                     f"backend {a.backend_tokens:,}"]
        for key, name in (("user_tokens", "message"), ("tools_tokens", "tool schemas")):
            if extra.get(key) is not None:
                breakdown.append(f"{name} {int(extra[key]):,}")
        counted = "counted at the agent" if remote else f"counted here · {len(a.messages)} messages sent"
        totals = node.add(_label(f"Totals: {a.total_tokens:,} tok {counted}"),
                          data=NodeInfo(n, "totals", "heading"))
        for part in breakdown:
            totals.add_leaf(_label(part), data=NodeInfo(n, "line"))
        if entry.usage is not None and entry.usage.prompt_tokens is not None:
            counted = f"model counted {entry.usage.prompt_tokens:,} in"
            if entry.usage.completion_tokens is not None:
                counted += f", {entry.usage.completion_tokens:,} out"
            last = entry.usage.last_prompt_tokens
            if last is not None and last != entry.usage.prompt_tokens:  # several requests (tool rounds)
                counted += f" over the turn's requests; the last took {last:,} in"
            totals.add_leaf(_label(counted), data=NodeInfo(n, "line"))
        if entry.usage is not None and entry.usage.cost_usd is not None:
            totals.add_leaf(_label(f"turn cost ${entry.usage.cost_usd:.4f}"), data=NodeInfo(n, "line"))
