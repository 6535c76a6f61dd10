"""Merging concurrent edits from their common base (agent/documents/merge.py): the base found by walking both ``prev``
chains, a deletion kept deleted, a one-sided change taken, a true conflict marked; no base: every difference is a
conflict, never a silent union."""

from __future__ import annotations

from agent_support import AGENT_KEY, NOW, memory_event
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from didactyl_tui.agent.documents.lineage import MAX_CHAIN
from didactyl_tui.agent.documents.merge import (
    END,
    MIDDLE,
    START,
    Conflict,
    conflicts_left,
    merge_base,
    merge_three_way,
    merge_two_way,
)
from didactyl_tui.nostr.event import Event

BASE = "milk\neggs\nbread\nbutter\njam\n"


def test_a_line_deleted_on_one_side_stays_deleted() -> None:
    ours = "milk\nbread\nbutter\njam\n"  # eggs deleted
    theirs = "milk\neggs\nbread\nbutter\nhoney\n"  # jam changed, far from it
    merged = merge_three_way(BASE, ours, theirs)
    assert merged.text == "milk\nbread\nbutter\nhoney\n" and merged.conflicts == []
    assert merge_three_way(BASE, theirs, ours).text == "milk\nbread\nbutter\nhoney\n"  # either way round


def test_a_change_on_one_side_only_is_taken_and_the_same_change_twice_is_no_conflict() -> None:
    assert merge_three_way(BASE, BASE, BASE.replace("jam", "honey")).text == BASE.replace("jam", "honey")
    assert merge_three_way(BASE, BASE.replace("jam", "honey"), BASE).text == BASE.replace("jam", "honey")
    both = BASE.replace("milk", "oat milk")
    assert merge_three_way(BASE, both, both).text == both


def test_a_true_conflict_is_marked_with_both_sides_and_the_base() -> None:
    merged = merge_three_way(BASE, BASE.replace("bread", "rye bread"), BASE.replace("bread", "no bread"))
    assert merged.conflicts == [Conflict(("rye bread",), ("no bread",), ("bread",))]
    assert merged.text == f"milk\neggs\n{START}\nrye bread\n{MIDDLE}\nno bread\n{END}\nbutter\njam\n"
    assert conflicts_left(merged.text) == 1
    # Both adding at the same place is a conflict too: which comes first is the person's call.
    added = merge_three_way("a\n", "a\nours\n", "a\ntheirs\n")
    assert added.text == f"a\n{START}\nours\n{MIDDLE}\ntheirs\n{END}\n"


def test_without_a_base_every_difference_is_a_conflict() -> None:
    merged = merge_two_way("milk\nbread\njam\n", "milk\neggs\nbread\nhoney\n")
    assert not merged.three_way
    assert merged.conflicts == [Conflict((), ("eggs",)), Conflict(("jam",), ("honey",))]
    assert merged.text.startswith("milk\n") and "bread\n" in merged.text
    assert merge_two_way("same\n", "same\n").text == "same\n"


def test_conflicts_left_counts_the_markers_not_an_ordinary_rule_line() -> None:
    assert conflicts_left("Title\n=======\ntext\n") == 0  # a markdown heading underline is not a marker
    assert conflicts_left(f"{START}\na\n{MIDDLE}\nb\n") == 1  # half-resolved still counts
    assert conflicts_left(f"{START}\r\na\r\n{MIDDLE}\r\nb\r\n{END}\r\n") == 1


# --- properties ---------------------------------------------------------------------------------------------------

LINES = st.lists(st.text(alphabet="abcdef ", min_size=1, max_size=6), max_size=12, unique=True)


@settings(max_examples=300, deadline=None)
@given(base=LINES, data=st.data())
def test_properties_of_the_three_way_merge(base: list[str], data: st.DataObject) -> None:
    def edit(lines: list[str], tag: str) -> list[str]:
        out = []
        for n, line in enumerate(lines):
            action = data.draw(st.sampled_from(["keep", "keep", "delete", "change"]), label=f"{tag}{n}")
            if action == "keep":
                out.append(line)
            elif action == "change":
                out.append(f"{tag}{n}:{line}")
        if data.draw(st.booleans(), label=f"{tag} adds"):
            out.insert(data.draw(st.integers(0, len(out)), label=f"{tag} at"), f"{tag} new")
        return out

    ours, theirs = edit(base, "O"), edit(base, "T")
    b, o, t = ("".join(x + "\n" for x in lines) for lines in (base, ours, theirs))
    merged = merge_three_way(b, o, t)
    # Identities: one side unchanged takes the other; both the same takes it.
    assert merge_three_way(b, b, t).text == t and merge_three_way(b, o, b).text == o
    assert merge_three_way(b, o, o).text == o
    assert conflicts_left(merged.text) == len(merged.conflicts)
    out = merged.text.split("\n")
    # A base line both sides deleted never comes back; one deleted by one side and kept by the other comes back
    # only inside a conflict (where the other side changed something next to it), never in the clean text.
    clean = [line for region in merged.regions if not isinstance(region, Conflict) for line in region]
    for line in base:
        if line not in ours and line not in theirs:
            assert line not in out
        elif (line in ours) != (line in theirs):
            assert line not in clean
    # Every line of the result comes from one side or the other (or is a marker).
    assert set(out) <= {*ours, *theirs, START, MIDDLE, END, ""}


@settings(max_examples=200, deadline=None)
@given(ours=LINES, theirs=LINES)
def test_properties_of_the_two_way_fallback(ours: list[str], theirs: list[str]) -> None:
    assume(ours != theirs)
    o, t = ("".join(x + "\n" for x in lines) for lines in (ours, theirs))
    merged = merge_two_way(o, t)
    assert merged.conflicts  # something differs: the person decides it
    # Resolving each conflict with one side gives back exactly that side: nothing is dropped or invented.
    for side in ("ours", "theirs"):
        lines = [x for r in merged.regions for x in (getattr(r, side) if isinstance(r, Conflict) else r)]
        assert lines == (ours if side == "ours" else theirs)


# --- the merge base -----------------------------------------------------------------------------------------------


def _version(text: str, at: int, base: Event | None) -> Event:
    return memory_event(AGENT_KEY, text, NOW + at, prev=base.id if base else None)


def test_the_merge_base_is_the_nearest_version_both_chains_reach() -> None:
    v1 = _version("one", 1, None)
    v2 = _version("two", 2, v1)
    ours = _version("ours", 3, v2)
    theirs = _version("theirs", 4, v2)
    late = _version("later", 5, theirs)
    kept = {ev.id: ev for ev in (v1, v2, ours, theirs, late)}
    assert merge_base(kept.get, ours, theirs) == v2.id
    assert merge_base(kept.get, ours, late) == v2.id  # through a later version of theirs
    assert merge_base(kept.get, v2, late) == v2.id  # one built on the other: that one is the base
    # A chain that leaves this device's history: the id it names still meets the other chain.
    del kept[v2.id]
    assert merge_base(kept.get, ours, theirs) == v2.id
    assert merge_base(kept.get, ours, late) == v2.id  # theirs (kept) still names v2
    del kept[theirs.id]
    assert merge_base(kept.get, ours, late) is None  # late's chain stops at a version this device never saw
    # An untagged writer (another client): no base to find.
    untagged = _version("from another client", 6, None)
    assert merge_base(kept.get, ours, untagged) is None


def test_the_walk_is_bounded() -> None:
    root = _version("root", 0, None)
    chain = [root]
    for n in range(1, MAX_CHAIN + 5):
        chain.append(_version(f"v{n}", n, chain[-1]))
    kept = {ev.id: ev for ev in chain}
    beside = _version("beside", 1, root)
    assert merge_base(kept.get, chain[10], beside) == root.id
    assert merge_base(kept.get, chain[-1], beside) is None  # the root lies further back than the walk goes
