"""Merging two concurrent versions of a document from their common base: the base is found, never guessed, and a
three-way line merge keeps a deletion deleted.

- :func:`merge_base`: every version names the version it was edited from (``["prev", id]``, lineage.py); the
  common base of two versions is the nearest version both ``prev`` chains reach, walked through the versions this
  device kept (at most :data:`~.lineage.MAX_CHAIN` steps each). None when there is none (a writer that does not tag
  its base, a chain that leaves this device's history, or no shared past).
- :func:`merge_three_way`: breezy's ``merge3``. A line changed (or deleted) on one side only takes that side's
  change; both sides making the same change is no conflict; both changing the same lines differently is a
  :class:`Conflict`, kept for the person with both sides.
- :func:`merge_two_way`: the honest fallback without a base: lines both versions share are kept, and every place
  they differ is a conflict (a union would bring a deleted line back; a guess would lose one).

Lines are compared without their line ends (``\\n``); the final newline is merged like a line. The merged text
marks each conflict with :data:`START` / :data:`MIDDLE` / :data:`END` lines (git's markers, named ``yours`` and
``theirs``). Pure: no I/O; the history is read through the ``lookup`` callable.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import merge3

from ...nostr.event import Event
from .lineage import MAX_CHAIN, base_of

START, MIDDLE, END = "<<<<<<< yours", "=======", ">>>>>>> theirs"


@dataclass(frozen=True, slots=True)
class Conflict:
    """Lines both sides changed differently (``base``: what they were, None when unknown)."""

    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    base: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class MergeResult:
    """The merged document as clean runs of lines and conflicts, in order."""

    regions: tuple[tuple[str, ...] | Conflict, ...]
    final_newline: bool
    three_way: bool  # False: no common base was known (every difference is a conflict)

    @property
    def conflicts(self) -> list[Conflict]:
        return [r for r in self.regions if isinstance(r, Conflict)]

    @property
    def text(self) -> str:
        """The merged text, each conflict between the marker lines (yours first)."""
        lines: list[str] = []
        for region in self.regions:
            if isinstance(region, Conflict):
                lines += [START, *region.ours, MIDDLE, *region.theirs, END]
            else:
                lines += region
        text = "\n".join(lines)
        return text + "\n" if lines and (self.final_newline or self.conflicts) else text


def _lines(text: str) -> tuple[list[str], bool]:
    """(lines without their ends, whether the text ends with a newline)."""
    if not text:
        return [], False
    lines = text.split("\n")
    if lines[-1] == "":
        return lines[:-1], True
    return lines, False


def _regions(parts: Iterable[tuple[str, ...] | Conflict]) -> tuple[tuple[str, ...] | Conflict, ...]:
    """Adjacent clean runs joined; empty ones dropped."""
    out: list[tuple[str, ...] | Conflict] = []
    for part in parts:
        if isinstance(part, Conflict):
            out.append(part)
        elif part:
            if out and not isinstance(out[-1], Conflict):
                out[-1] = (*out[-1], *part)
            else:
                out.append(part)
    return tuple(out)


def merge_three_way(base: str, ours: str, theirs: str) -> MergeResult:
    """``ours`` and ``theirs``, both edited from ``base``, merged line by line."""
    (b, b_nl), (a, a_nl), (t, t_nl) = _lines(base), _lines(ours), _lines(theirs)
    m = merge3.Merge3(b, a, t)
    parts: list[tuple[str, ...] | Conflict] = []
    for region in m.merge_regions():
        if region[0] != "conflict":
            parts.append(_clean(region, b, a, t))
            continue
        # A conflict is refined (lines both sides share inside it are no conflict), each part keeping the base of
        # the whole region: what those lines were before either edit.
        base_lines = tuple(b[region[1]:region[2]])
        for sub in m.reprocess_merge_regions(iter([region])):
            if sub[0] == "conflict":
                _, _z0, _z1, a0, a1, t0, t1 = sub
                parts.append(Conflict(tuple(a[a0:a1]), tuple(t[t0:t1]), base_lines))
            else:
                parts.append(_clean(sub, b, a, t))
    final = t_nl if a_nl == b_nl else a_nl  # the final newline merged like a line: the side that changed it
    return MergeResult(_regions(parts), final, True)


def _clean(region: merge3.ExtendedMergeRegion, b: list[str], a: list[str], t: list[str]) -> tuple[str, ...]:
    kind, start, end = region[:3]
    return tuple((b if kind == "unchanged" else t if kind == "b" else a)[start:end])


def merge_two_way(ours: str, theirs: str) -> MergeResult:
    """Without a base: what both have is kept, every difference is a conflict for the person."""
    (a, a_nl), (t, t_nl) = _lines(ours), _lines(theirs)
    parts: list[tuple[str, ...] | Conflict] = []
    for op, a0, a1, t0, t1 in difflib.SequenceMatcher(None, a, t, autojunk=False).get_opcodes():
        parts.append(tuple(a[a0:a1]) if op == "equal" else Conflict(tuple(a[a0:a1]), tuple(t[t0:t1])))
    return MergeResult(_regions(parts), a_nl or t_nl, False)


def merge_base(lookup: Callable[[str], Event | None], ours: Event, theirs: Event) -> str | None:
    """The id of the nearest version both ``ours`` and ``theirs`` were edited from (either one itself, when the
    other was built on it), or None. ``lookup``: a version this device kept, by id (None when it has not). Each
    chain is walked at most :data:`MAX_CHAIN` steps; an id the chain names but this device never saw still counts
    as a meeting point (the caller then has no text for it)."""
    ancestors = dict.fromkeys(_chain(lookup, ours))
    for event_id in _chain(lookup, theirs):
        if event_id in ancestors:
            return event_id
    return None


def _chain(lookup: Callable[[str], Event | None], ev: Event) -> list[str]:
    """``ev``'s id, then the ids its ``prev`` tags name, back through the versions kept (bounded)."""
    out = [ev.id]
    current: Event | None = ev
    for _ in range(MAX_CHAIN):
        base = base_of(current) if current is not None else None
        if base is None or base in out:
            break
        out.append(base)
        current = lookup(base)
    return out


def conflicts_left(text: str) -> int:
    """How many conflicts the person has not resolved yet: marker lines still in ``text``."""
    starts = ends = 0
    for line in text.split("\n"):
        line = line.rstrip("\r")
        starts += line == START
        ends += line == END
    return max(starts, ends)
