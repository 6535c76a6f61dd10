"""Changes to part of a document's text: a line inserted at a place, an exact passage replaced, and the change as a
unified diff. Pure. The agent's ``memory_insert`` / ``memory_replace`` apply them to the text in use, under the
document's save lock (a :class:`~.saving.Change` through :meth:`~.saving.DocumentSaves.save`), so a model adds one
line to a long memory without writing the whole memory again (and without the chance of dropping a line of it).

A change that cannot apply raises :class:`~.codec.DocumentError` saying why: the save path then signs nothing.
Lines are separated by ``\\n`` only (what a person and the model count as lines).
"""

from __future__ import annotations

from .codec import DocumentError
from .text_diff import diff_lines

DIFF_CONTEXT_LINES = 1  # unchanged lines shown around a change
DIFF_MAX_CHARS = 4_000  # a diff longer than this is cut (it goes back to the model with every tool result)


def lines_of(text: str) -> list[str]:
    """``text`` as its lines, each keeping its ``\\n`` (the last one has none when the text does not end with one)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def insert_lines(text: str, new: str, line: int, title: str) -> str:
    """``new`` (one or more lines) on lines of its own after line ``line`` of ``text`` (0: at the top; -1: at the
    end). At the end, the result is ``text`` + a line break (when ``text`` has no final one) + ``new``."""
    if not new:
        raise DocumentError("there is nothing to insert (the text is empty); nothing was changed", title)
    lines = lines_of(text)
    count = len(lines)
    at = count if line == -1 else line
    if not 0 <= at <= count:
        raise DocumentError(f"insert_line {line} is outside the {title.lower()}, which has {count:,} line"
                            f"{'' if count == 1 else 's'}: give 0 (the top) to {count:,}, or -1 for the end; "
                            "nothing was changed", title)
    before, after = "".join(lines[:at]), "".join(lines[at:])
    if before and not before.endswith("\n"):
        before += "\n"  # at the end of a text with no final line break: the new line starts a line of its own
    if after or text.endswith("\n"):
        new = new if new.endswith("\n") else new + "\n"
    return before + new + after


def replace_once(text: str, old: str, new: str, title: str) -> str:
    """``text`` with the one occurrence of ``old`` replaced by ``new`` (empty: deleted). Refused unless ``old`` occurs
    exactly once: a guess at which one was meant could change the wrong passage."""
    if not old:
        raise DocumentError("old_str is empty: give the exact passage to replace; nothing was changed", title)
    found = text.count(old)
    if found == 0:
        raise DocumentError(f"the passage was not found in the {title.lower()}; nothing was changed. Copy it exactly "
                            "as it is now (spaces, punctuation and line breaks included)", title)
    if found > 1:
        raise DocumentError(f"the passage occurs {found:,} times in the {title.lower()}; nothing was changed. "
                            "Include more of the text around it, so that it occurs exactly once", title)
    if old == new:
        raise DocumentError("old_str and new_str are the same: there is nothing to change", title)
    return text.replace(old, new, 1)


def change_diff(old: str, new: str, label: str, max_chars: int = DIFF_MAX_CHARS) -> str:
    """The change from ``old`` to ``new`` as a unified diff (``--- label`` / ``+++ label``, one line of context), cut
    at ``max_chars`` with a line saying how much was left out."""
    lines = diff_lines(old, new, old_label=f"{label} (before)", new_label=f"{label} (after)",
                       context=DIFF_CONTEXT_LINES, line_ends=False)  # the one diff (text_diff.py)
    out: list[str] = []
    size = 0
    for n, line in enumerate(lines):
        if size + len(line) + 1 > max_chars:
            out.append(f"… ({len(lines) - n:,} more diff lines not shown)")
            break
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)
