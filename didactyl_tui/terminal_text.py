"""Text from outside (relays, the model, files, config) made safe for a terminal (issue #10).

A terminal obeys control characters and escape sequences wherever they appear in what it prints: a relay's
reason holding ``ESC ] 52`` writes the clipboard, ``ESC ] 0`` retitles the window, ``ESC [ 2 J`` clears the
screen, ``CR`` or cursor moves draw fake text over real text. :func:`clean` removes every such sequence
*whole* (CSI, OSC, DCS, SOS, PM, APC and the two-byte ``ESC x`` forms, in 7-bit and 8-bit C1 spelling; a
string sequence left unterminated is removed to the end, as a terminal would swallow it), then every
remaining C0/C1 control and DEL, keeping newlines and tabs. :func:`one_line` also folds all whitespace,
for reasons, notices and errors. :class:`StreamCleaner` does the same for text that arrives in pieces
(a streamed reply), holding back a sequence cut between two pieces.

A web address from outside (a remote signer's ``auth_url``) is shown to be read and opened: :func:`clean_link`
also removes the invisible format characters a terminal does not draw but obeys or a person cannot see —
bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), the marks U+200E, U+200F and U+061C,
zero-width characters, word joiners, tag characters (Unicode's category Cf) — so the host a person reads is the
host that is opened (an override before ``/moc.live`` shows it as ``evil.com/``). Other text keeps them:
right-to-left writing uses the marks.

Pure, stdlib only, importable by every layer. Markup is another matter: Textual views show outside text
as ``Content`` or with ``markup=False``, never parsed as markup.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["StreamCleaner", "clean", "clean_link", "json_text", "one_line"]

# ESC-introduced string sequences (OSC ], DCS P, SOS X, PM ^, APC _) and their 8-bit forms; they end at
# BEL (OSC only, but accepted for all, as xterm does), ST (ESC \ or 0x9c), or the end of the text.
_STRING = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x9c\x1b]*(?:\x07|\x9c|\x1b\\|(?=\x1b)|\Z)"
# CSI: ESC [ or 0x9b, parameter bytes, intermediate bytes, one final byte (or the end of the text).
_CSI = r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*(?:[\x40-\x7e]|\Z)"
# Other escape sequences: ESC, intermediate bytes, a final byte (ESC 7, ESC ( B, ESC c ...).
_ESC = r"\x1b[\x20-\x2f]*[\x30-\x7e]?"
_SEQUENCE = re.compile(f"{_STRING}|{_CSI}|{_ESC}")
# Every C0 control but TAB and LF, DEL, and every C1 control.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROLS_NO_TAB = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A piece may end inside a sequence: its last introducer is where to look.
_LAST_INTRODUCER = re.compile(r"[\x1b\x90\x98\x9b\x9d\x9e\x9f][^\x1b\x90\x98\x9b\x9d\x9e\x9f]*\Z")
_MAX_HELD = 4096  # a sequence longer than this is not waited for (it is removed all the same)


def clean(text: str, *, newlines: bool = True, tabs: bool = True) -> str:
    """``text`` without escape sequences and control characters.

    ``CR LF`` becomes ``LF``; a lone ``CR`` (which returns the cursor to overwrite the line) is removed.
    With ``newlines=False`` a newline becomes a space; with ``tabs=False`` a tab does.
    """
    if not text or (text.isprintable() and "\x1b" not in text):
        return text  # the common case: nothing to do (isprintable is false for every control)
    text = _SEQUENCE.sub("", text.replace("\r\n", "\n"))
    if not newlines:
        text = text.replace("\n", " ")
    if not tabs:
        text = text.replace("\t", " ")
    return _CONTROLS.sub("", text)


def one_line(text: str) -> str:
    """:func:`clean`, on one line, with runs of whitespace folded to one space (reasons, notices, errors)."""
    return " ".join(clean(text, newlines=False, tabs=False).split())


def clean_link(text: str) -> str:
    """:func:`one_line`, and without Unicode format characters (category Cf: bidirectional overrides, isolates and
    marks, zero-width characters, tags): a web address from outside, as shown and as opened."""
    text = one_line(text)
    if text.isascii():
        return text
    return " ".join("".join(ch for ch in text if unicodedata.category(ch) != "Cf").split())


def json_text(dumped: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with DEL and C1 controls written as ``\\u``
    escapes: ``json.dumps`` escapes C0 controls but leaves these raw, and a terminal obeys 0x9b as CSI.
    The data is unchanged (a JSON reader reads the same strings)."""
    return _C1_OR_DEL.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)


_C1_OR_DEL = re.compile(r"[\x7f-\x9f]")


class StreamCleaner:
    """:func:`clean` for text arriving in pieces: a sequence cut between two pieces is removed whole."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        text = self._held + piece
        self._held = ""
        tail = _LAST_INTRODUCER.search(text)
        if tail is not None and len(text) - tail.start() <= _MAX_HELD:
            sequence = _SEQUENCE.match(text, tail.start())
            if sequence is not None and sequence.end() == len(text):  # it may go on in the next piece
                self._held = text[tail.start():]
                text = text[: tail.start()]
        if text.endswith("\r"):  # may be the CR of a CR LF
            self._held = "\r" + self._held
            text = text[:-1]
        return clean(text)

    def flush(self) -> str:
        """What is held back, cleaned (the end of the stream)."""
        held, self._held = self._held, ""
        return clean(held)
