"""Hand back to the system the memory a process's start-up freed (issue #21: lean at rest).

Python keeps small objects in arenas of its own and returns an arena once it is empty; anything larger comes
from the C library's ``malloc``, whose freed pages stay with the process, counted in its RSS, until they are
trimmed. Start-up frees a great deal (parsed config and CSS, import-time temporaries, a first query's rows).
"""

from __future__ import annotations

import sys


def release_freed_memory() -> None:
    """Return the freed ``malloc`` pages to the system (glibc's ``malloc_trim(0)``); call it once, when a
    process has finished starting. A no-op where there is no glibc; it never raises."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # here: only a process that trims pays for it (~0.4 MiB)

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # musl or another libc: nothing to trim with
        pass
