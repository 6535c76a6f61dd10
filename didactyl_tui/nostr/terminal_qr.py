"""A QR code drawn with text, for a ``nostrconnect://`` URI a phone signer scans off the terminal.

Pure: text in, text out. The matrix comes from segno (PyPI, no dependencies); each character cell holds two
module rows with the half blocks ``▀ ▄ █``, so a QR code of version 10 (57 modules plus the quiet zone) takes
about 61 columns and 31 lines.
"""

from __future__ import annotations

from ..errors import NostrError

QUIET_ZONE = 2  # modules of blank border (the standard asks for 4; phone scanners read 2 on a screen)
_CELLS = {(True, True): "█", (True, False): "▀", (False, True): "▄", (False, False): " "}


def render_qr(data: str, *, border: int = QUIET_ZONE, light_background: bool = False, error: str = "m") -> str:
    """``data`` as a QR code in half blocks, one string of lines.

    The terminal draws characters in its foreground colour: on a dark background (the default) the light
    modules and the quiet zone are drawn and the dark ones left blank; ``light_background`` draws the dark ones.
    """
    import segno  # small, and only needed when a QR code is shown

    try:
        code = segno.make(data, error=error, micro=False)
    except segno.DataOverflowError:
        raise NostrError(f"{len(data):,} characters are too many for a QR code") from None
    rows = [[bool(dark) == light_background for dark in row] for row in code.matrix_iter(scale=1, border=border)]
    if len(rows) % 2:
        rows.append([False] * len(rows[0]))
    return "\n".join("".join(_CELLS[(top, bottom)] for top, bottom in zip(upper, lower, strict=True))
                     for upper, lower in zip(rows[0::2], rows[1::2], strict=True))
