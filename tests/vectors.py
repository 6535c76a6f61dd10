"""Locate and load the shared test vectors (``../shared/vectors`` beside the repo checkout).

CI clones the repo into a folder with ``shared/`` next to it, exactly as ``/work/main`` and
``/work/shared`` sit here, so the path is relative to this file, never absolute.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

VECTORS_DIR = Path(__file__).resolve().parents[2] / "shared" / "vectors"


class VectorsMissingError(FileNotFoundError):
    """The shared vectors are not where the repo layout says they are."""


def vector_path(name: str) -> Path:
    """Path of one vector file; a clear error if the shared folder or the file is missing."""
    path = VECTORS_DIR / name
    if not path.is_file():
        raise VectorsMissingError(
            f"test vector {name!r} not found at {path}. The tests expect the shared vectors folder "
            f"at <checkout>/../shared/vectors (a 'shared' folder beside the repo folder)."
        )
    return path


def load_json(name: str) -> Any:
    with vector_path(name).open(encoding="utf-8") as fh:
        return json.load(fh)


def load_csv(name: str) -> list[dict[str, str]]:
    with vector_path(name).open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))
