"""The one diff of two texts (agent/documents/text_diff.py): the app's diff view and the CLI's `memory diff` both use
it. Right with and without final newlines: a line without one is marked, never glued to the next line."""

from __future__ import annotations

from didactyl_tui.agent.documents.text_diff import NO_NEWLINE, diff_lines, unified_diff


def test_texts_without_final_newlines_diff_one_line_per_change() -> None:
    assert diff_lines("short", "long") == [
        "--- older", "+++ newer", "@@ -1 +1 @@", "-short", NO_NEWLINE, "+long", NO_NEWLINE]
    assert unified_diff("short", "long") == "\n".join(
        ["--- older", "+++ newer", "@@ -1 +1 @@", "-short", NO_NEWLINE, "+long", NO_NEWLINE]) + "\n"


def test_texts_with_final_newlines_diff_as_always() -> None:
    assert diff_lines("a\nb\n", "a\nc\n", old_label="v1", new_label="v2") == [
        "--- v1", "+++ v2", "@@ -1,2 +1,2 @@", " a", "-b", "+c"]
    assert diff_lines("a\nb\n", "a\nb\n") == [] and unified_diff("same", "same") == ""


def test_a_final_newline_alone_is_a_difference_and_said_so() -> None:
    assert diff_lines("a", "a\n")[2:] == ["@@ -1 +1 @@", "-a", NO_NEWLINE, "+a"]
    assert diff_lines("a\nb", "a\nc")[2:] == ["@@ -1,2 +1,2 @@", " a", "-b", NO_NEWLINE, "+c", NO_NEWLINE]


def test_only_newline_breaks_a_line() -> None:
    # A form feed or a Unicode line separator inside a memory's line is part of it (not a line of its own).
    assert diff_lines("x\x0cy\u2028z\n", "x\x0cy\u2028Z\n")[3:] == ["-x\x0cy\u2028z", "+x\x0cy\u2028Z"]
