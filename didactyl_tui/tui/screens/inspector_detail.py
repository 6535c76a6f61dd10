"""One prompt assembly full-screen: the whole tree, open; diff against the previous one; dry run."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Footer

from ..actions import bindings
from ..widgets.assembly_tree import AssemblyTree, InspectorEntry
from .diff import DiffScreen

if TYPE_CHECKING:
    from ...service.types import PromptAssembly


def assembly_as_text(a: PromptAssembly) -> str:
    """A stable text form of an assembly, for diffs: sections, backend, tools, history, totals."""
    out = [f"model: {a.model}", f"total tokens: {a.total_tokens}", ""]
    for layer in a.layers:
        head = f"## {layer.section} [{layer.role}] tool={layer.tool or '-'} tokens={layer.tokens}"
        if layer.skipped:
            head += f" SKIPPED ({layer.skip_reason or 'no reason'})"
        out.append(head)
        if layer.source_event is not None:
            out.append(f"source event: {layer.source_event.event_id} at {layer.source_event.created_at}")
        out += [layer.content, ""]
    out.append(f"## memory backend: {a.backend_id or 'none'} tokens={a.backend_tokens} place={a.backend_place}")
    out += [a.backend_context or "", ""]
    origins = a.tool_origins
    out.append("## tools offered: " + ", ".join(f"{name} ({origins[name]})" if name in origins else name
                                                for name in a.tool_names))
    out.append(f"## history: {len(a.history)} messages, {a.history_dropped} dropped")
    for m in a.history:
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        out.append(f"{m.get('role')}: {text}")
    out += ["", f"## user message: {a.user_message if a.user_message is not None else '(none)'}"]
    return "\n".join(out)


class InspectorDetailScreen(Screen[str | None]):
    """Dismissed with ``"dry_run"`` when the user asks for a dry run from here, else ``None``."""

    CSS_PATH = "inspector_detail.tcss"  # read when first shown, not before the first frame

    BINDINGS = bindings("inspector_detail")

    def __init__(self, entry: InspectorEntry, previous: InspectorEntry | None) -> None:
        super().__init__()
        self.entry = entry
        self.previous = previous

    def compose(self) -> ComposeResult:
        with Vertical(id="inspector-detail") as box:
            box.border_title = self.entry.label
            with Horizontal(classes="pane-actions"):
                yield Button("Diff vs previous", id="diff", compact=True, disabled=self.previous is None)
                yield Button("Dry run", id="dry-run", compact=True)
                yield Button("Back", id="back", compact=True)
            yield AssemblyTree(preview_lines=None, id="detail-tree")
        yield Footer()

    def on_mount(self) -> None:
        tree = self.query_one(AssemblyTree)
        node = tree.add_entry(self.entry, expand=True)
        for child in node.children:
            child.expand()
        tree.focus()

    def action_expand_all(self) -> None:
        self.query_one(AssemblyTree).root.expand_all()

    async def action_diff(self) -> None:
        await show_assembly_diff(self, self.previous, self.entry)

    def action_dry_run(self) -> None:
        self.dismiss("dry_run")

    def action_close(self) -> None:
        self.dismiss(None)

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        await self.run_action({"diff": "diff", "dry-run": "dry_run"}.get(event.button.id or "", "close"))


async def show_assembly_diff(screen: Screen[Any], previous: Any, entry: Any) -> None:
    """Open the diff of two inspector entries (or say there is nothing to compare with)."""
    if previous is None:
        screen.notify("This is the first assembly: nothing to compare with.", title="Diff")
        return
    await screen.app.push_screen(DiffScreen(
        assembly_as_text(previous.assembly), assembly_as_text(entry.assembly),
        title=f"Assembly #{previous.number} → #{entry.number}",
        old_label=f"#{previous.number}", new_label=f"#{entry.number}",
    ))
