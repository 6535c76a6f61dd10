"""The screens use the service through service/screen_api.py's ScreenService (its parts by name and three facts),
not the whole AppService: AppService is a ScreenService, and no screen or widget reaches past it (read from the
source: every attribute taken of a service value in tui/, the app shell apart)."""

from __future__ import annotations

import ast
from pathlib import Path

from tui_support import make_config, make_env

from didactyl_tui.service.app import AppService
from didactyl_tui.service.screen_api import ScreenService

TUI = Path(__file__).resolve().parents[2] / "didactyl_tui" / "tui"
SHELL = TUI / "app.py"  # builds, starts and stops the service: the whole AppService is its business
SERVICE_CALLS = {"require_service", "service_or_notify"}


def members() -> set[str]:
    return {name for name in vars(ScreenService) if not name.startswith("_")} | set(ScreenService.__annotations__)


def service_attributes(source: str) -> set[str]:
    """Attributes taken of a service value: ``x.service``, ``require_service()``, a name bound to one, or a
    parameter called ``service``."""
    tree = ast.parse(source)
    names = {"service"}

    def is_service(node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return node.func.attr in SERVICE_CALLS
        if isinstance(node, ast.Attribute):
            return node.attr == "service"
        return isinstance(node, ast.Name) and node.id in names

    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                first = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else target
                if isinstance(first, ast.Name) and (is_service(node.value) or (
                        isinstance(target, ast.Tuple) and isinstance(node.value, ast.Call)
                        and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "_chat_or_notify")):
                    names.add(first.id)
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and is_service(node.value)}


def test_app_service_is_a_screen_service(tmp_path: Path) -> None:
    service = AppService(make_config(), data_dir=tmp_path, env=make_env())
    for name in members():
        if name in ScreenService.__annotations__:
            assert hasattr(service, name), name  # a plain attribute: there before the service starts
        else:
            assert hasattr(AppService, name), name  # a property or a method


def test_no_screen_reaches_past_the_screen_service() -> None:
    used: dict[str, set[str]] = {}
    for path in TUI.rglob("*.py"):
        if path == SHELL:
            continue
        source = path.read_text()
        assert "service.app import" not in source, f"{path.name} imports AppService: type it as ScreenService"
        for name in service_attributes(source) - members():
            used.setdefault(name, set()).add(path.name)
    assert not used, f"screens use members ScreenService does not name: {used}"


def test_the_scan_sees_what_a_screen_takes() -> None:
    """The scan itself: a screen's use of a member past the API is found (else the test above could not fail)."""
    source = "def f(self):\n    svc = self.require_service()\n    svc.bundle.export()\n    self.app.service.runtime\n"
    assert service_attributes(source) == {"bundle", "runtime"}
