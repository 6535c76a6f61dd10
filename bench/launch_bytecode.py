"""Launched apps write bytecode, as on a person's machine: where ``$PYTHONDONTWRITEBYTECODE`` is set (this machine's
shell sets it), every launch would compile the package's modules again (~50-80 ms a launch, more for
``--continue``, which imports more). The cache goes to a folder of its own (nothing is written in the source tree),
the way the test suite keeps one (tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path


def writing_bytecode(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a launched app: bytecode written and read back, in the user's cache folder."""
    if not env.get("PYTHONDONTWRITEBYTECODE") or env.get("PYTHONPYCACHEPREFIX"):
        return env
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(Path(base) / "didactyl-tui-bench" / "pycache")
    return out
