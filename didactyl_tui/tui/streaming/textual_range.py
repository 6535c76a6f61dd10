"""The Textual versions the fast path is tested on, and the installed one.

The fast path reads and overrides Textual's private state, which any release may change. It runs only on a
Textual in ``TESTED`` (the range ``pyproject.toml`` pins; tests/tui/streaming/test_textual_internals.py fails when
either the pin or the installed Textual leaves it); on any other the reply view takes the public path.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

TESTED = ((8, 2), (8, 3))  # at least 8.2, below 8.3
PIN = "textual>=8.2,<8.3"  # as written in pyproject.toml


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: "8.2.8" -> (8, 2, 8); "8.3.0rc1" -> (8, 3, 0)."""
    numbers: list[int] = []
    for piece in version.split("."):
        match = re.match(r"\d+", piece)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() < len(piece):  # "0rc1", "0+local": the release ends here
            break
    return tuple(numbers)


def is_tested(version: str) -> bool:
    low, high = TESTED
    found = release(version)
    return bool(found) and low <= found < high and not _pre_release_of(found, version, low)


def _pre_release_of(found: tuple[int, ...], version: str, low: tuple[int, ...]) -> bool:
    """8.2.0rc1 comes before 8.2: outside a range that starts at 8.2."""
    return found[:len(low)] == low and all(n == 0 for n in found[len(low):]) and bool(
        re.search(r"(a|b|rc|dev)\d*", version.split("+")[0]))


@lru_cache(maxsize=1)
def installed() -> str:
    """The installed Textual's version. From its dist-info folder's name (``textual.__version__`` reads the
    package metadata, whose machinery costs ~80 ms to import here, and this is read before the first frame),
    else from ``textual.__version__``."""
    import textual

    site = os.path.dirname(os.path.dirname(os.path.abspath(textual.__file__)))
    try:
        names = [entry.name for entry in os.scandir(site)
                 if entry.name.startswith("textual-") and entry.name.endswith(".dist-info")]
    except OSError:
        names = []
    if len(names) == 1:
        return names[0][len("textual-"):-len(".dist-info")]
    return str(textual.__version__)
