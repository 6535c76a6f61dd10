"""Locate and load the spec test vectors kept in this repository (``tests/vectors/``).

They are public data (sources and licences in ``tests/vectors/README.md``); the tests never read anything
outside the checkout, so a clone with nothing beside it runs them all.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

VECTORS_DIR = Path(__file__).resolve().parent / "vectors"


class VectorsMissingError(FileNotFoundError):
    """A vector file the tests need is not in ``tests/vectors/``."""


def vector_path(name: str) -> Path:
    """Path of one vector file; a clear error if it is missing from the checkout."""
    path = VECTORS_DIR / name
    if not path.is_file():
        raise VectorsMissingError(f"test vector {name!r} not found at {path} "
                                  "(the repository keeps them in tests/vectors/)")
    return path


def load_json(name: str) -> Any:
    with vector_path(name).open(encoding="utf-8") as fh:
        return json.load(fh)


def load_csv(name: str) -> list[dict[str, str]]:
    with vector_path(name).open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def spec_nsec(entry: dict[str, str]) -> str:
    """The nsec of a NIP-19 ``nsec`` vector entry, derived from its hex (the repository keeps no full nsec) and
    checked against the SHA-256 of the spec's string, so the encoding is still compared with the spec's."""
    import hashlib

    from didactyl_tui.nostr import nip19

    nsec = nip19.encode_nsec(entry["hex"])
    if hashlib.sha256(nsec.encode()).hexdigest() != entry["bech32_sha256"]:
        raise AssertionError("encoding the spec's nsec example gives another string than the spec's")
    return nsec
