"""NIP-19: bech32-encoded entities (npub, nsec, note) and TLV pointers (nprofile, nevent, naddr).

Bech32 is BIP-173 (the original checksum constant, not bech32m) without BIP-173's 90-character
limit, because TLV entities with relay URLs are routinely longer. Pure functions; every error is a
:class:`NostrError` with a reason a person can act on. Errors never echo the input string, since it
may be a secret key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import NostrError

_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_CHARSET_INDEX = {c: i for i, c in enumerate(_CHARSET)}
_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
_BECH32_CONST = 1
_CHECKSUM_LEN = 6
# Far above any real pointer (nostr-tools uses the same bound); stops a pasted novel from being parsed.
MAX_BECH32_LENGTH = 5000

_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")

TLV_SPECIAL = 0
TLV_RELAY = 1
TLV_AUTHOR = 2
TLV_KIND = 3

_TITLE = "Bad NIP-19 string"


def _fail(reason: str) -> NostrError:
    return NostrError(reason, _TITLE)


# --- bech32 (BIP-173) ---------------------------------------------------------------------


def _polymod(values: list[int]) -> int:
    chk = 1
    for v in values:
        top = chk >> 25
        chk = ((chk & 0x1FFFFFF) << 5) ^ v
        for i in range(5):
            if (top >> i) & 1:
                chk ^= _GENERATOR[i]
    return chk


def _hrp_expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def _convert_bits(data: bytes | list[int], from_bits: int, to_bits: int, pad: bool) -> list[int]:
    acc = 0
    bits = 0
    out: list[int] = []
    maxv = (1 << to_bits) - 1
    for value in data:
        acc = (acc << from_bits) | value
        bits += from_bits
        while bits >= to_bits:
            bits -= to_bits
            out.append((acc >> bits) & maxv)
    if pad:
        if bits:
            out.append((acc << (to_bits - bits)) & maxv)
    elif bits >= from_bits or ((acc << (to_bits - bits)) & maxv):
        # Leftover bits must be fewer than one input group and all zero (BIP-173).
        raise _fail("invalid bech32 padding")
    return out


def bech32_encode(hrp: str, data: bytes) -> str:
    """Encode ``data`` under the human-readable prefix ``hrp`` (lowercase output)."""
    hrp = hrp.lower()
    words = _convert_bits(data, 8, 5, pad=True)
    poly = _polymod([*_hrp_expand(hrp), *words, 0, 0, 0, 0, 0, 0]) ^ _BECH32_CONST
    checksum = [(poly >> 5 * (5 - i)) & 31 for i in range(_CHECKSUM_LEN)]
    text = hrp + "1" + "".join(_CHARSET[w] for w in words + checksum)
    if len(text) > MAX_BECH32_LENGTH:
        raise _fail(f"encoded {hrp} would be {len(text)} characters (limit {MAX_BECH32_LENGTH})")
    return text


def bech32_decode(text: str) -> tuple[str, bytes]:
    """Decode a bech32 string into ``(hrp, data bytes)``; raises :class:`NostrError` on any fault."""
    if not isinstance(text, str):
        raise _fail("a NIP-19 string must be text")
    text = text.strip()
    if not text:
        raise _fail("empty NIP-19 string")
    if len(text) > MAX_BECH32_LENGTH:
        raise _fail(f"NIP-19 string is {len(text)} characters (limit {MAX_BECH32_LENGTH})")
    for i, ch in enumerate(text):
        if not 33 <= ord(ch) <= 126:
            raise _fail(f"invalid character at position {i} (bech32 is printable ASCII only)")
    if text.lower() != text and text.upper() != text:
        raise _fail("mixed upper and lower case (bech32 must be all one case)")
    text = text.lower()
    sep = text.rfind("1")
    if sep < 1:
        raise _fail("missing prefix or '1' separator")
    if len(text) - sep - 1 < _CHECKSUM_LEN:
        raise _fail("too short to hold a bech32 checksum")
    hrp, rest = text[:sep], text[sep + 1 :]
    words: list[int] = []
    for i, ch in enumerate(rest, start=sep + 1):
        w = _CHARSET_INDEX.get(ch)
        if w is None:
            raise _fail(f"invalid character at position {i} (bech32 has no 1, b, i or o)")
        words.append(w)
    if _polymod(_hrp_expand(hrp) + words) != _BECH32_CONST:
        raise _fail("bad checksum (a character was mistyped or the string was cut)")
    data = bytes(_convert_bits(words[:-_CHECKSUM_LEN], 5, 8, pad=False))
    return hrp, data


# --- pointers -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProfilePointer:
    pubkey: str
    relays: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EventPointer:
    id: str
    relays: list[str] = field(default_factory=list)
    author: str | None = None
    kind: int | None = None


@dataclass(frozen=True, slots=True)
class AddressPointer:
    identifier: str
    pubkey: str
    kind: int
    relays: list[str] = field(default_factory=list)


# --- helpers ------------------------------------------------------------------------------


def _hex32(value: str, what: str) -> bytes:
    if not isinstance(value, str) or not _HEX64.match(value):
        raise _fail(f"{what} must be 64 hex characters")
    return bytes.fromhex(value)


def _decode_expect(text: str, hrp: str) -> bytes:
    got, data = bech32_decode(text)
    if got != hrp:
        raise _fail(f"expected {hrp}, got {got}")
    return data


def _decode_32(text: str, hrp: str) -> str:
    data = _decode_expect(text, hrp)
    if len(data) != 32:
        raise _fail(f"{hrp} must encode 32 bytes, got {len(data)}")
    return data.hex()


def _tlv_parse(data: bytes, hrp: str) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    i = 0
    while i < len(data):
        if i + 2 > len(data):
            raise _fail(f"malformed {hrp}: TLV entry cut short at byte {i}")
        typ, length = data[i], data[i + 1]
        end = i + 2 + length
        if end > len(data):
            left = len(data) - i - 2
            raise _fail(f"malformed {hrp}: TLV entry at byte {i} claims {length} bytes, only {left} left")
        out.setdefault(typ, []).append(data[i + 2 : end])
        i = end
    return out


def _tlv_encode(entries: list[tuple[int, bytes]]) -> bytes:
    out = bytearray()
    for typ, value in entries:
        if len(value) > 255:
            raise _fail(f"TLV value of type {typ} is {len(value)} bytes (limit 255)")
        out += bytes((typ, len(value))) + value
    return bytes(out)


def _relays_of(tlv: dict[int, list[bytes]], hrp: str) -> list[str]:
    relays: list[str] = []
    for raw in tlv.get(TLV_RELAY, []):
        try:
            relays.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise _fail(f"malformed {hrp}: a relay URL is not valid UTF-8") from None
    return relays


def _relay_entries(relays: Sequence[str]) -> list[tuple[int, bytes]]:
    if isinstance(relays, str):  # a bare string would be split into characters
        raise _fail("relays must be a list of URLs")
    if not all(isinstance(r, str) for r in relays):
        raise _fail("every relay must be a URL string")
    return [(TLV_RELAY, r.encode("utf-8")) for r in relays]


def _special_32(tlv: dict[int, list[bytes]], hrp: str, what: str) -> str:
    values = tlv.get(TLV_SPECIAL)
    if not values:
        raise _fail(f"malformed {hrp}: no {what}")
    if len(values[0]) != 32:
        raise _fail(f"malformed {hrp}: {what} must be 32 bytes, got {len(values[0])}")
    return values[0].hex()


def _author_of(tlv: dict[int, list[bytes]], hrp: str) -> str | None:
    values = tlv.get(TLV_AUTHOR)
    if not values:
        return None
    if len(values[0]) != 32:
        raise _fail(f"malformed {hrp}: author must be 32 bytes, got {len(values[0])}")
    return values[0].hex()


def _kind_of(tlv: dict[int, list[bytes]], hrp: str) -> int | None:
    values = tlv.get(TLV_KIND)
    if not values:
        return None
    if len(values[0]) != 4:
        raise _fail(f"malformed {hrp}: kind must be 4 bytes, got {len(values[0])}")
    return int.from_bytes(values[0], "big")


def _kind_bytes(kind: int) -> bytes:
    if isinstance(kind, bool) or not isinstance(kind, int) or not 0 <= kind < 2**32:
        raise _fail("kind must be an integer in 0..4294967295")
    return kind.to_bytes(4, "big")


# --- npub / nsec / note -------------------------------------------------------------------


def encode_npub(pubkey_hex: str) -> str:
    return bech32_encode("npub", _hex32(pubkey_hex, "a public key"))


def short_npub(pubkey_hex: str) -> str:
    """A key as a person compares it with another screen (a signer's): the start and end of its npub."""
    npub = encode_npub(pubkey_hex)
    return f"{npub[:12]}…{npub[-6:]}"


def decode_npub(text: str) -> str:
    return _decode_32(text, "npub")


def encode_nsec(secret_hex: str) -> str:
    return bech32_encode("nsec", _hex32(secret_hex, "a secret key"))


def decode_nsec(text: str) -> str:
    return _decode_32(text, "nsec")


def encode_note(event_id_hex: str) -> str:
    return bech32_encode("note", _hex32(event_id_hex, "an event id"))


def decode_note(text: str) -> str:
    return _decode_32(text, "note")


# --- nprofile / nevent / naddr --------------------------------------------------------------


def encode_nprofile(pubkey_hex: str, relays: Sequence[str] = ()) -> str:
    entries = [(TLV_SPECIAL, _hex32(pubkey_hex, "a public key")), *_relay_entries(relays)]
    return bech32_encode("nprofile", _tlv_encode(entries))


def decode_nprofile(text: str) -> ProfilePointer:
    return _nprofile_from(_decode_expect(text, "nprofile"))


def _nprofile_from(data: bytes) -> ProfilePointer:
    tlv = _tlv_parse(data, "nprofile")
    return ProfilePointer(_special_32(tlv, "nprofile", "public key"), _relays_of(tlv, "nprofile"))


def encode_nevent(
    event_id_hex: str, relays: Sequence[str] = (), author: str | None = None, kind: int | None = None
) -> str:
    entries = [(TLV_SPECIAL, _hex32(event_id_hex, "an event id")), *_relay_entries(relays)]
    if author is not None:
        entries.append((TLV_AUTHOR, _hex32(author, "the author")))
    if kind is not None:
        entries.append((TLV_KIND, _kind_bytes(kind)))
    return bech32_encode("nevent", _tlv_encode(entries))


def decode_nevent(text: str) -> EventPointer:
    return _nevent_from(_decode_expect(text, "nevent"))


def _nevent_from(data: bytes) -> EventPointer:
    tlv = _tlv_parse(data, "nevent")
    return EventPointer(
        id=_special_32(tlv, "nevent", "event id"),
        relays=_relays_of(tlv, "nevent"),
        author=_author_of(tlv, "nevent"),
        kind=_kind_of(tlv, "nevent"),
    )


def encode_naddr(identifier: str, pubkey: str, kind: int, relays: Sequence[str] = ()) -> str:
    if not isinstance(identifier, str):
        raise _fail("naddr identifier must be a string")
    entries = [
        (TLV_SPECIAL, identifier.encode("utf-8")),
        *_relay_entries(relays),
        (TLV_AUTHOR, _hex32(pubkey, "the author")),
        (TLV_KIND, _kind_bytes(kind)),
    ]
    return bech32_encode("naddr", _tlv_encode(entries))


def decode_naddr(text: str) -> AddressPointer:
    return _naddr_from(_decode_expect(text, "naddr"))


def _naddr_from(data: bytes) -> AddressPointer:
    tlv = _tlv_parse(data, "naddr")
    specials = tlv.get(TLV_SPECIAL)
    if not specials:
        raise _fail("malformed naddr: no identifier (d tag)")
    try:
        identifier = specials[0].decode("utf-8")
    except UnicodeDecodeError:
        raise _fail("malformed naddr: identifier is not valid UTF-8") from None
    author = _author_of(tlv, "naddr")
    if author is None:
        raise _fail("malformed naddr: no author")
    kind = _kind_of(tlv, "naddr")
    if kind is None:
        raise _fail("malformed naddr: no kind")
    return AddressPointer(identifier, author, kind, _relays_of(tlv, "naddr"))


# --- generic --------------------------------------------------------------------------------

Decoded = str | ProfilePointer | EventPointer | AddressPointer


def decode(text: str) -> tuple[str, Decoded]:
    """Decode any NIP-19 entity: ``("npub"|"nsec"|"note", hex)`` or ``(prefix, pointer)``."""
    hrp, data = bech32_decode(text)
    if hrp in ("npub", "nsec", "note"):
        if len(data) != 32:
            raise _fail(f"{hrp} must encode 32 bytes, got {len(data)}")
        return hrp, data.hex()
    if hrp == "nprofile":
        return hrp, _nprofile_from(data)
    if hrp == "nevent":
        return hrp, _nevent_from(data)
    if hrp == "naddr":
        return hrp, _naddr_from(data)
    raise _fail(f"unknown NIP-19 prefix {hrp!r} (expected npub, nsec, note, nprofile, nevent or naddr)")
