"""terminal_text: every escape sequence removed whole, text kept, newlines and tabs kept where meaningful."""

from __future__ import annotations

import json

import pytest

from didactyl_tui.terminal_text import StreamCleaner, clean, clean_link, json_text, one_line


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain text, [ui] and [/] too", "plain text, [ui] and [/] too"),
    ("a\x1b]52;c;aGVsbG8=\x07b", "ab"),  # OSC 52 ended by BEL
    ("a\x1b]0;title\x1b\\b", "ab"),  # OSC ended by ST
    ("a\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),  # hyperlink
    ("a\x1b[2J\x1b[1;1Hb", "ab"),  # CSI clear, cursor move
    ("a\x1b[38;2;255;0;0mred\x1b[0m", "ared"),  # CSI colours
    ("a\x1b[?1049hb", "ab"),  # private CSI (alternate screen)
    ("a\x1bP+q544e\x1b\\b", "ab"),  # DCS
    ("a\x1b_apc\x1b\\b\x1b^pm\x1b\\c\x1bXsos\x1b\\d", "abcd"),  # APC, PM, SOS
    ("a\x1b7\x1b8\x1bc\x1b(Bb", "ab"),  # two-byte forms, charset
    ("a\x9b2Jb\x9d0;t\x9cc\x90q\x9cd", "abcd"),  # 8-bit CSI, OSC, DCS
    ("a\x1b]52;c;never ended", "a"),  # an unterminated string sequence is removed to the end
    ("a\x1b[", "a"),  # a CSI cut short
    ("a\x1b", "a"),
    ("fake\rreal", "fakereal"),  # a lone CR would overwrite the line
    ("one\r\ntwo", "one\ntwo"),
    ("bell\x07 bs\x08 del\x7f nul\x00 vt\x0b ff\x0c c1\x85", "bell bs del nul vt ff c1"),
    ("keep\ttabs\nand newlines", "keep\ttabs\nand newlines"),
    ("unicode: héllo, 日本, emoji 🙂", "unicode: héllo, 日本, emoji 🙂"),
])
def test_clean(raw: str, shown: str) -> None:
    assert clean(raw) == shown
    assert "\x1b" not in clean(raw)


def test_one_line_folds_whitespace_and_drops_newlines() -> None:
    assert one_line("  blocked:\n\tnot\x1b[2J  allowed \r\n") == "blocked: not allowed"


@pytest.mark.parametrize("hidden", [
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",  # embeddings, pop, overrides
    "\u2066", "\u2067", "\u2068", "\u2069",  # isolates
    "\u200e", "\u200f", "\u061c",  # marks
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad",  # zero-width, joiners, BOM, soft hyphen
    "\U000e0041",  # a tag character
])
def test_a_link_loses_every_invisible_format_character(hidden: str) -> None:
    assert clean_link(f"https://bank.example/{hidden}moc.live{hidden}") == "https://bank.example/moc.live"


def test_a_link_is_also_one_clean_line_and_keeps_its_letters() -> None:
    assert clean_link(" https://x.example/a\x1b]52;c;QQ==\x07?b=1\n ") == "https://x.example/a?b=1"
    assert clean_link("https://例え.jp/パス") == "https://例え.jp/パス"
    assert one_line("שלום\u200f world") == "שלום\u200f world"  # other text keeps the marks right-to-left uses


def test_json_text_escapes_c1_and_del_and_keeps_the_data() -> None:
    data = {"reason": "x\x9b2J\x7f\x1b[0m é"}
    dumped = json_text(json.dumps(data, ensure_ascii=False))
    assert not any(0x7F <= ord(ch) <= 0x9F or ord(ch) < 0x20 for ch in dumped)
    assert json.loads(dumped) == data


def test_stream_holds_back_only_an_open_sequence() -> None:
    cleaner = StreamCleaner()
    assert cleaner.feed("hello \x1b]52;c;") == "hello "  # held: it may go on
    assert cleaner.feed("QQ==\x07world") == "world"
    assert cleaner.feed("\x1b[31mred") == "red"  # a complete sequence is not held
    assert cleaner.feed(" and \x1b[3") == " and "
    assert cleaner.flush() == ""
    assert cleaner.feed("end\r") == "end"
    assert cleaner.feed("\nnext") == "\nnext"  # CR LF across pieces stays a newline


def test_stream_does_not_hold_a_huge_sequence_forever() -> None:
    cleaner = StreamCleaner()
    out = cleaner.feed("a\x1b]52;c;" + "A" * 10_000)
    assert out == "a"  # removed, not held: memory stays bounded
    assert cleaner.feed("b") == "b"
