"""The one diff of two texts (document versions, prompt assemblies), for the app's diff view and the CLI alike.

A unified diff of lines split at ``\n`` only (a form feed or U+2028 inside a line is not a line break here), so a
text whose last line has no newline diffs correctly: that line is marked as git marks it, instead of the next line
of the diff being glued onto it.
"""

from __future__ import annotations

import difflib

NO_NEWLINE = "\\ No newline at end of file"


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def diff_lines(old: str, new: str, *, old_label: str = "older", new_label: str = "newer",
               context: int = 3, line_ends: bool = True) -> list[str]:
    """The unified diff as lines without their ends (empty when the texts are equal), ``context`` unchanged lines
    around each change; after a line that had no newline, :data:`NO_NEWLINE`. ``line_ends=False`` compares the lines
    as a person counts them (a missing final newline is no change): a line added after a last line that had none
    is one added line, not that line replaced (a change the agent made, shown to the model and the person)."""
    if not line_ends:
        return list(difflib.unified_diff(old.split("\n"), new.split("\n"), old_label, new_label, n=context,
                                         lineterm=""))
    out: list[str] = []
    for line in difflib.unified_diff(_lines(old), _lines(new), old_label, new_label, n=context):
        if line.endswith("\n"):
            out.append(line[:-1])
        else:
            out += [line, NO_NEWLINE]
    return out


def unified_diff(old: str, new: str, *, old_label: str = "older", new_label: str = "newer") -> str:
    """:func:`diff_lines` as one text, each line ending with a newline ("" when the texts are equal)."""
    return "".join(line + "\n" for line in diff_lines(old, new, old_label=old_label, new_label=new_label))
