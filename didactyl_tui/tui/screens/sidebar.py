"""The main screen's sidebar: memory (short- and long-term, and the tasks), self, and the prompt inspector, as tabs."""

from __future__ import annotations

from textual.lazy import Lazy
from textual.widgets import TabbedContent, TabPane

from ...config import Config
from ..widgets.memory_pane import MemoryPane
from ..widgets.prompt_inspector import PromptInspector
from ..widgets.self_pane import SelfPane
from ..widgets.tasks_pane import TasksPane

SHORT, LONG = "short_term", "long_term"


def build_sidebar(config: Config) -> TabbedContent:
    mem = config.memory
    sidebar = TabbedContent(id="sidebar", initial="memory")
    # What a `with TabbedContent():` block in compose does, so the sidebar can be built outside compose.
    for pane in (
        TabPane("Memory",
                MemoryPane(SHORT, "Short-term memory", limit=mem.short_term_max_chars, loadable=False,
                           id="short-term"),
                MemoryPane(LONG, "Long-term memory", limit=mem.long_term_max_chars, loadable=True, id="long-term"),
                TasksPane(id="tasks-pane"),
                id="memory"),
        # Hidden tabs mount once the sidebar is on screen.
        TabPane("Self", Lazy(SelfPane(id="self-pane")), id="self"),
        TabPane("Inspector", Lazy(PromptInspector(id="inspector-pane", keep=config.llm.saved_assemblies)),
                id="inspector"),
    ):
        sidebar.compose_add_child(pane)
    return sidebar
