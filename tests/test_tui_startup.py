"""The first frame comes before the service and litellm: launch ``python -m didactyl_tui`` on a pty with the
first-paint hook and look at what was imported by then. (Timings live in bench/startup_bench.py.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "startup_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("startup_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_first_frame_paints_before_the_service_and_litellm_are_imported(tmp_path: Path) -> None:
    bench = _bench()
    paint_file = tmp_path / "painted.json"
    env = bench.environment(tmp_path, paint_file)
    record = bench.run_once([sys.executable, "-m", "didactyl_tui"], env, paint_file)
    assert record["litellm"] is False
    assert record["service"] is False
    # Nothing was started: no key was created, no relay database opened.
    data = tmp_path / "data"
    assert not data.exists() or not any(data.iterdir())
