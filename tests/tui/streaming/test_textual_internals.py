"""Textual's internals stay inside the reply view's fast path, which runs only on the Textual it is tested on.

- No module of the package outside ``didactyl_tui/tui/streaming/`` touches a Textual internal. The scan reads
  Textual's own source (the installed one) for every private name it defines — class attributes, methods,
  ``self._x`` assignments, module-level names, names it sets on other objects, the ``_reactive_*`` /
  ``_default_*`` storage of reactives — and then reads ours:
  * an import from a private Textual module (``textual.widgets._markdown``) or of a private name, also by a
    string (``importlib.import_module``);
  * ``x._name`` on anything but ``self``, where ``_name`` is private in Textual (in the TUI's modules, the only
    ones that hold Textual objects: a contract keeps Textual out of the other layers);
  * ``self._name`` / ``super()._name``, a ``def _name`` or a class attribute ``_name`` in a class whose MRO
    holds a Textual class (or a mixin mixed into one) where one of those Textual classes has ``_name``:
    reading Textual's private state, overriding a private method, or clobbering it by accident;
  * a ``def _on_key``-style handler of a Textual message in such a class (Textual's internal handler
    convention: ``on_*`` is the public one);
  * ``getattr``/``setattr``/``hasattr``/``delattr``/``attrgetter``/``methodcaller`` with such a name, or with a
    name that is not a constant string, and ``vars()`` / ``__dict__`` / ``__getattribute__`` / ``exec`` / ``eval``
    (in the TUI's modules): the ways round an attribute access.
  The scan is checked against samples of each way in (and it does find the fast path's own uses).
- ``pyproject.toml`` pins Textual to the fast path's tested range, and the installed Textual is in it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest

import didactyl_tui

PACKAGE = Path(didactyl_tui.__file__).resolve().parent
ALLOWED = PACKAGE / "tui" / "streaming"
ROOT = PACKAGE.parent
ACCESSORS = {"getattr": 1, "hasattr": 1, "setattr": 1, "delattr": 1, "getattr_static": 1}
NAME_LISTS = {"attrgetter", "methodcaller"}  # every (dotted) string argument is a name
ESCAPES = {"__dict__", "__getattribute__", "__setattr__", "__delattr__"}
DYNAMIC_PREFIXES = ("_reactive_", "_default_")  # a reactive's storage, set by name at run time


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# --- Textual's private names, read from its source ------------------------------------------------------------


@dataclass
class TextualNames:
    by_class: dict[str, set[str]] = field(default_factory=dict)  # "module.Qual.Name" -> private names it has
    everything: set[str] = field(default_factory=set)

    def of_mro(self, klass: type) -> set[str]:
        out: set[str] = set()
        for base in inspect.getmro(klass):
            if base.__module__.split(".")[0] == "textual":
                out |= self.by_class.get(f"{base.__module__}.{base.__qualname__}", set())
        return out

    def is_private(self, name: str) -> bool:
        return name in self.everything or name.startswith(DYNAMIC_PREFIXES)


def _is_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


class _TextualReader(ast.NodeVisitor):
    def __init__(self, module: str, names: TextualNames) -> None:
        self.module, self.names, self.stack = module, names, []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.stack.append(node.name)
        found = self.names.by_class.setdefault(f"{self.module}.{'.'.join(self.stack)}", set())
        for statement in node.body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and _private(statement.name):
                found.add(statement.name)
            targets = (statement.targets if isinstance(statement, ast.Assign)
                       else [statement.target] if isinstance(statement, ast.AnnAssign) else [])
            found |= {t.id for t in targets if isinstance(t, ast.Name) and _private(t.id)}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and _is_self(sub.value) and _private(sub.attr):
                found.add(sub.attr)
        found |= {f"_{node.name.lstrip('_')}{n}" for n in list(found) if n.startswith("__")}  # name-mangled
        self.names.everything |= found
        self.generic_visit(node)
        self.stack.pop()


@lru_cache(maxsize=1)
def textual_names() -> TextualNames:
    import textual

    names = TextualNames()
    root = Path(textual.__file__).resolve().parent
    for path in root.rglob("*.py"):
        module = ".".join(("textual", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        tree = ast.parse(path.read_text("utf-8"))
        _TextualReader(module, names).visit(tree)
        for node in tree.body:  # module-level private names (reached as textual.x._name)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and _private(node.name):
                names.everything.add(node.name)
            for target in node.targets if isinstance(node, ast.Assign) else []:
                if isinstance(target, ast.Name) and _private(target.id):
                    names.everything.add(target.id)
        for node in ast.walk(tree):  # private names Textual sets on objects other than self
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.everything.add(node.attr)
    return names


# --- the scan of our code -----------------------------------------------------------------------------------------


def _textual_users(klass: type) -> list[type]:
    """``klass`` and every class that has it in its MRO (a mixin is checked against the screens it is mixed
    into)."""
    seen: list[type] = [klass]
    stack = [klass]
    while stack:
        for sub in type.__subclasses__(stack.pop()) if klass is not type else ():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen


def _handler_names() -> set[str]:
    """``on_key``, ``on_worker_state_changed``, ...: the handler name of every message class loaded now."""
    from textual.message import Message

    names, stack = set(), [Message]
    while stack:
        klass = stack.pop()
        if hasattr(klass, "handler_name"):  # set on each subclass (Message itself has none)
            names.add(klass.handler_name)
        stack += type.__subclasses__(klass)
    return names


def _private_module(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] == "textual" and any(_private(p) for p in parts)


class _Scan(ast.NodeVisitor):
    def __init__(self, namespace: dict[str, object], names: TextualNames, holds_textual: bool) -> None:
        self.namespace, self.names, self.holds_textual = namespace, names, holds_textual
        self.classes: list[tuple[str, set[str], bool]] = []  # (name, Textual private names in reach, Textual-made)
        self.found: list[tuple[int, str]] = []

    def _flag(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    def _class_names(self, node: ast.ClassDef) -> tuple[set[str], bool]:
        target: object = self.namespace.get(self.classes[0][0]) if self.classes else self.namespace.get(node.name)
        for name in [c[0] for c in self.classes[1:]] + ([node.name] if self.classes else []):
            target = getattr(target, name, None)
        if not inspect.isclass(target):  # made at run time (inside a function): every Textual name counts
            return set(self.names.everything), True
        reach: set[str] = set()
        for user in _textual_users(target):
            reach |= self.names.of_mro(user)
        return reach, bool(reach)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        reach, textual_made = self._class_names(node)
        self.classes.append((node.name, reach, textual_made))
        for statement in node.body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                if statement.name in reach:
                    self._flag(statement, f"overrides Textual's private {statement.name}")
                elif textual_made and statement.name[1:] in _handler_names():
                    self._flag(statement, f"handler {statement.name} (Textual's internal convention; use on_*)")
            targets = (statement.targets if isinstance(statement, ast.Assign)
                       else [statement.target] if isinstance(statement, ast.AnnAssign) else [])
            for t in targets:
                if isinstance(t, ast.Name) and t.id in reach:
                    self._flag(statement, f"class attribute {t.id} is Textual's")
        self.generic_visit(node)
        self.classes.pop()

    def _attribute(self, node: ast.AST, receiver: ast.expr, name: str) -> None:
        if not _private(name):
            return
        if _is_self(receiver):
            if self.classes and (name in self.classes[-1][1] or
                                 (self.classes[-1][2] and name.startswith(DYNAMIC_PREFIXES))):
                self._flag(node, f"self.{name} is Textual's")
        elif self.holds_textual and self.names.is_private(name):
            self._flag(node, f".{name} is private in Textual")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._attribute(node, node.value, node.attr)
        if self.holds_textual and node.attr in ESCAPES:
            self._flag(node, f"{node.attr} reaches attributes by name")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if called in ACCESSORS and len(node.args) > ACCESSORS[called]:
            name = node.args[ACCESSORS[called]]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                self._attribute(node, node.args[0], name.value)
            elif self.holds_textual:
                self._flag(node, f"{called} with a name that is not a constant string")
        elif called in NAME_LISTS:
            for arg in node.args[:None if called == "attrgetter" else 1]:
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    if self.holds_textual:
                        self._flag(node, f"{called} with a name that is not a constant string")
                    continue
                for part in arg.value.split("."):
                    if _private(part) and self.names.is_private(part):
                        self._flag(node, f"{called}({arg.value!r}) is private in Textual")
        elif called == "vars" and self.holds_textual:
            self._flag(node, "vars() reaches attributes by name")
        elif called in ("exec", "eval") and isinstance(func, ast.Name) and self.holds_textual:
            self._flag(node, f"{called}() runs code the scan cannot read")
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _private_module(alias.name):
                self._flag(node, f"imports {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0 and module.split(".")[0] == "textual":
            if _private_module(module):
                self._flag(node, f"imports from {module}")
            for alias in node.names:
                if _private(alias.name):
                    self._flag(node, f"imports {module}.{alias.name}")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and re.fullmatch(r"textual(\.\w+)+", node.value) and \
                _private_module(node.value):
            self._flag(node, f"names the module {node.value}")


def scan(source: str, namespace: dict[str, object], *, holds_textual: bool) -> list[tuple[int, str]]:
    """Where ``source`` (whose run-time objects are in ``namespace``) touches a Textual internal."""
    visitor = _Scan(namespace, textual_names(), holds_textual)
    visitor.visit(ast.parse(source))
    return sorted(visitor.found)


def _modules(root: Path) -> Iterator[tuple[Path, str]]:
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield path, ".".join(parts).removesuffix(".__init__")


def scan_module(path: Path, module: str) -> list[tuple[int, str]]:
    source = path.read_text("utf-8")
    holds_textual = (PACKAGE / "tui") in path.parents or re.search(r"^\s*(from|import) textual", source, re.M)
    namespace = vars(importlib.import_module(module))
    return scan(source, namespace, holds_textual=bool(holds_textual))


# --- the promises -------------------------------------------------------------------------------------------------


def test_no_module_outside_tui_streaming_touches_a_textual_internal() -> None:
    modules = list(_modules(PACKAGE))
    for _, module in modules:  # all first: a mixin is checked against every class it is mixed into
        importlib.import_module(module)
    found = []
    for path, module in modules:
        if ALLOWED in path.parents:
            continue
        found += [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in scan_module(path, module)]
    assert not found, "Textual internals outside tui/streaming/:\n" + "\n".join(found)


def test_the_scan_finds_the_fast_paths_own_uses() -> None:
    """The scan is real: run over tui/streaming/ it finds what is known to be there."""
    for _, module in _modules(PACKAGE):  # all first: the hooks are a mixin, found private through the screens it is
        importlib.import_module(module)  # mixed into (loaded here or not, by whichever tests ran before on this worker)
    found = {}
    for path, module in _modules(ALLOWED):
        found[path.name] = " | ".join(what for _, what in scan_module(path, module))
    assert "_compositor" in found["one_layout.py"] and "_layout_required" in found["one_layout.py"]
    assert "overrides Textual's private _refresh_layout" in found["screen_hooks.py"]
    assert "overrides Textual's private _on_timer_update" in found["screen_hooks.py"]
    assert "self._nodes is Textual's" in found["message_part.py"]
    assert "imports from textual.widgets._markdown" in found["message_part.py"]
    assert "_parse_markdown" in found["message_part.py"]  # reached through getattr


SAMPLES = {
    "private module": "from textual.widgets._markdown import MarkdownHeader",
    "private module by import": "import textual._compositor",
    "private name": "from textual.app import _ASYNCIO_GET_EVENT_LOOP_IS_DEPRECATED",
    "private module by string": "import importlib\nimportlib.import_module('textual._compositor')",
    "private attribute": "def f(screen):\n    return screen._compositor",
    "private attribute, nested": "def f(w):\n    return w.app._batch_count",
    "getattr": "def f(screen):\n    return getattr(screen, '_dirty_widgets', None)",
    "setattr": "def f(w):\n    setattr(w, '_layout_required', False)",
    "getattr by a computed name": "def f(w, n):\n    return getattr(w, '_' + n)",
    "attrgetter": "from operator import attrgetter\nget = attrgetter('screen._compositor')",
    "vars": "def f(w):\n    return vars(w)['_layout_required']",
    "__dict__": "def f(w):\n    return w.__dict__",
    "reactive storage": "def f(w):\n    return w._reactive_streaming",
    "self in a widget": "from textual.widgets import Markdown\nclass M(Markdown):\n    def f(self):\n"
                        "        return self._markdown",
    "super in a widget": "from textual.screen import Screen\nclass S(Screen):\n    def f(self):\n"
                         "        return super()._refresh_layout()",
    "override": "from textual.screen import Screen\nclass S(Screen):\n    def _on_timer_update(self):\n"
                "        pass",
    "private handler": "from textual.widgets import Static\nclass S(Static):\n    async def _on_click(self, e):\n"
                       "        pass",
    "clobbered state": "from textual.widget import Widget\nclass W(Widget):\n    def __init__(self):\n"
                       "        super().__init__()\n        self._layout_required = True",
    "mixin": "from textual.screen import Screen\nclass Hooks:\n    def f(self):\n        return self._compositor\n"
             "class S(Hooks, Screen):\n    pass",
    "class made in a function": "from textual.widgets import Static\ndef make():\n    class S(Static):\n"
                                "        def f(self):\n            return self._render_cache\n    return S",
    "patched from outside": "from textual.screen import Screen\ndef f(self):\n    pass\nScreen._refresh_layout = f",
    "joined literals": "def f(screen):\n    return getattr(screen, '_' 'compositor')",
    "exec": "def f(screen):\n    exec('screen.x = 1')",
}


@pytest.mark.parametrize("source", SAMPLES.values(), ids=SAMPLES.keys())
def test_the_scan_catches_each_way_in(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.screen import Screen

    # "patched from outside" really patches Screen: put the real method back after the test, or every
    # later app in this process would lay out through the sample's no-op.
    monkeypatch.setattr(Screen, "_refresh_layout", Screen.__dict__["_refresh_layout"])
    namespace: dict[str, object] = {"__name__": "sample"}
    exec(compile(source, "<sample>", "exec"), namespace)
    assert scan(source, namespace, holds_textual=True), "not caught"


def test_the_scan_leaves_our_own_private_state_alone() -> None:
    source = ("from textual.widgets import Static\nclass S(Static):\n    def __init__(self):\n"
              "        super().__init__()\n        self._painted_chars = 0\n"
              "    def on_click(self):\n        return self._painted_chars\n"
              "class Plain:\n    def __init__(self):\n        self._lock = None\n    def f(self):\n"
              "        return self._lock\n")
    namespace: dict[str, object] = {"__name__": "sample"}
    exec(compile(source, "<sample>", "exec"), namespace)
    assert scan(source, namespace, holds_textual=True) == []


# --- the pinned range -----------------------------------------------------------------------------------------------


def _pinned_requirement() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    (textual,) = [r for r in project["dependencies"] if re.match(r"textual\b", r)]
    return textual.replace(" ", "")


def test_pyproject_pins_textual_to_the_range_the_fast_path_is_tested_on() -> None:
    from didactyl_tui.tui.streaming import textual_range

    assert _pinned_requirement() == textual_range.PIN
    low, high = textual_range.TESTED
    assert textual_range.PIN == f"textual>={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"


def test_the_installed_textual_is_one_the_fast_path_is_tested_on() -> None:
    from didactyl_tui.tui.streaming import fast_path_supported, textual_range

    version = textual_range.installed()
    assert textual_range.is_tested(version), (
        f"Textual {version} is outside {textual_range.PIN}: run the streaming tests and bench/stream_bench.py "
        "on it, then widen TESTED and the pin together")
    assert fast_path_supported()


@pytest.mark.parametrize(("version", "tested"), [
    ("8.2.0", True), ("8.2.8", True), ("8.2.99.post1", True), ("8.3.0", False), ("8.3.0rc1", False),
    ("8.2.0rc1", False), ("8.1.9", False), ("9.0.0", False), ("8", False), ("", False), ("garbage", False),
])
def test_tested_versions(version: str, tested: bool) -> None:
    from didactyl_tui.tui.streaming import textual_range

    assert textual_range.is_tested(version) is tested


def test_an_untested_textual_takes_the_public_path_and_says_so_once(monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    import didactyl_tui.tui.streaming as streaming

    monkeypatch.setattr(streaming.textual_range, "installed", lambda: "8.3.1")
    monkeypatch.setattr(streaming, "_untested_said", False)
    with caplog.at_level("WARNING", logger="didactyl.tui.streaming"):
        paths = [streaming.choose_path(True) for _ in range(3)]
    assert paths == [streaming.ReplyPath.PUBLIC] * 3
    said = [r.getMessage() for r in caplog.records if r.name == "didactyl.tui.streaming"]
    assert len(said) == 1 and "8.3.1" in said[0] and "public" in said[0]
    assert streaming.choose_path(False) is streaming.ReplyPath.PUBLIC


def test_on_an_untested_textual_the_screen_overrides_nothing_of_textuals() -> None:
    """The screen's hooks are chosen when the package loads, by the installed version."""
    from didactyl_tui.tui import streaming
    from didactyl_tui.tui.screens.main import MainScreen

    public = streaming.hooks_for(False)
    assert not any(_private(name) for name in vars(public))
    assert streaming.ScreenHooks is streaming.hooks_for(streaming.fast_path_supported())
    assert streaming.ScreenHooks in MainScreen.__mro__
