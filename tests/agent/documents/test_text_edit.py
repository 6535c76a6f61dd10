"""Changes to part of a document's text (agent/documents/text_edit.py): where a line goes, what counts as a line,
refusals that change nothing, and a diff bounded in size."""

from __future__ import annotations

import pytest

from didactyl_tui.agent.documents.codec import DocumentError
from didactyl_tui.agent.documents.text_edit import change_diff, insert_lines, lines_of, replace_once

T = "Long-Term Memory"


def test_lines_keep_their_breaks_and_only_newline_separates_them() -> None:
    assert lines_of("") == [] and lines_of("a") == ["a"] and lines_of("a\n") == ["a\n"]
    assert lines_of("a\u2028b\r\nc") == ["a\u2028b\r\n", "c"]  # a separator a person does not see is no line break


@pytest.mark.parametrize(("text", "line", "want"), [
    ("", -1, "x"), ("", 0, "x"), ("a", -1, "a\nx"), ("a\n", -1, "a\nx\n"), ("a\nb", 0, "x\na\nb"),
    ("a\nb", 1, "a\nx\nb"), ("a\nb", 2, "a\nb\nx"), ("a\n\nb", 2, "a\n\nx\nb"),
])
def test_insert_puts_the_text_on_lines_of_its_own(text: str, line: int, want: str) -> None:
    assert insert_lines(text, "x", line, T) == want


def test_insert_refuses_a_place_outside_the_text_and_empty_text() -> None:
    with pytest.raises(DocumentError, match=r"insert_line 5 is outside .* 2 lines: give 0 \(the top\) to 2"):
        insert_lines("a\nb", "x", 5, T)
    with pytest.raises(DocumentError, match="outside"):
        insert_lines("a", "x", -2, T)
    with pytest.raises(DocumentError, match="nothing to insert"):
        insert_lines("a", "", -1, T)


def test_replace_needs_exactly_one_occurrence() -> None:
    assert replace_once("tea, then tea.", "then tea", "then coffee", T) == "tea, then coffee."
    for old, reason in (("", "old_str is empty"), ("coffee", "not found"), ("tea", "occurs 2 times")):
        with pytest.raises(DocumentError, match=reason):
            replace_once("tea, then tea.", old, "x", T)
    with pytest.raises(DocumentError, match="the same"):
        replace_once("tea", "tea", "tea", T)


def test_the_diff_shows_the_change_with_one_line_around_it_and_is_cut_when_long() -> None:
    diff = change_diff("a\nb\nc\nd", "a\nb\nX\nd", "long_term")
    assert diff.splitlines() == ["--- long_term (before)", "+++ long_term (after)", "@@ -2,3 +2,3 @@", " b", "-c",
                                 "+X", " d"]
    # Lines as a person counts them: a line added after a last line with no newline is one line added.
    assert change_diff("a\nb", "a\nb\nc", "long_term").splitlines()[2:] == ["@@ -2 +2,2 @@", " b", "+c"]
    big = change_diff("", "\n".join(f"line {n}" for n in range(2000)), "long_term", max_chars=500)
    assert len(big) <= 560 and big.endswith("more diff lines not shown)")
